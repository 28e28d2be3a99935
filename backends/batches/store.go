package batches

import (
	"context"
	"errors"
	"time"
)

// Store is the batch store the Service (the API and the runner) consumes:
// the durable state of every batch. The first implementation is SQLite
// (OpenSQLiteStore); batchestest.Run is the conformance suite any
// implementation must pass; PostgresStore is the fleet one. Everything
// else a batch has is either in the files store (its input, output and
// error files) or in a Results (its lines' results while it runs).
//
// Implementations are safe for concurrent use, by several processes
// sharing the same state: the checks of Create and the status compare of
// Transition are atomic.
type Store interface {
	// Create stores a new batch unless its owner already has maxActive
	// batches not in a terminal state (ErrLimit), or, al != nil and
	// al.LinesPerDay > 0, the Lines of the owner's batches created in the
	// allowance window ending at b.CreatedAt plus b.Lines would exceed
	// al.LinesPerDay (ErrAllowance, with al.Used and al.ResetAt filled in).
	// Batches that failed without ever running (failed, InProgressAt 0) do
	// not count against the allowance. The checks and the insert are one
	// atomic step: concurrent creates cannot both pass them.
	Create(ctx context.Context, b Batch, maxActive int, al *Allowance) error
	// Get returns owner's batch id; another owner's is ErrNotFound.
	Get(ctx context.Context, owner, id string) (Batch, error)
	// Load returns batch id whoever owns it (the runner's read), or
	// ErrNotFound.
	Load(ctx context.Context, id string) (Batch, error)
	// List returns up to limit of owner's batches, newest created first,
	// after the batch named by after ("" from the newest), and whether more
	// follow. An after that is not one of owner's batches is ErrBadCursor.
	List(ctx context.Context, owner, after string, limit int) ([]Batch, bool, error)
	// Active returns the ids of all owners' batches not in a terminal
	// state, oldest first (the runner claims them with Claim instead).
	Active(ctx context.Context) ([]string, error)
	// IsActive reports whether batch id exists and is not in a terminal
	// state.
	IsActive(ctx context.Context, id string) (bool, error)
	// Transition moves batch id to status to if its status is one of from,
	// stamping to's timestamp (StampOf) with now and applying ch, and
	// reports whether it did. The compare and the set are one atomic step,
	// so a cancel and the runner's own transitions never overwrite each
	// other.
	Transition(ctx context.Context, id string, from []string, to string, now time.Time, ch Change) (bool, error)
	// Update applies ch to batch id without changing its status (progress
	// checkpoints, output file ids).
	Update(ctx context.Context, id string, ch Change) error

	// Claim leases one runnable batch (validating, in_progress, finalizing
	// or cancelling) that holds no live lease to replicaID for lease, and
	// returns its id, oldest first; "" when there is none. Concurrent
	// claims never return the same batch while its lease lives.
	Claim(ctx context.Context, replicaID string, lease time.Duration) (string, error)
	// Renew extends replicaID's lease on batch id by lease from now, and
	// reports whether replicaID still held it (false: it expired and
	// another replica took the batch, or the batch ended).
	Renew(ctx context.Context, id, replicaID string, lease time.Duration) (bool, error)
	// Release gives up replicaID's lease on batch id, or on every batch it
	// holds when id is "" (what a restarted replica with a stable id left).
	Release(ctx context.Context, id, replicaID string) error
	Close() error
}

// Change is what Transition and Update write besides the status: nil
// fields are left as they are.
type Change struct {
	// Counts replaces all of the batch's counts and usage.
	Counts *Counts
	// Total replaces Counts.Total only (validation counts the lines).
	Total *int64
	// Model is the model the input's lines name.
	Model *string
	// Errors replaces errors.data.
	Errors []BatchError
	// OutputFileID and ErrorFileID record the files made from the
	// results.
	OutputFileID, ErrorFileID *string
}

// Batch statuses (OpenAI's).
const (
	StatusValidating = "validating"
	StatusFailed     = "failed"
	StatusInProgress = "in_progress"
	StatusFinalizing = "finalizing"
	StatusCompleted  = "completed"
	StatusExpired    = "expired"
	StatusCancelling = "cancelling"
	StatusCancelled  = "cancelled"
)

// activeStatuses are the statuses that count against MaxActive and that Run
// picks up after a restart.
var activeStatuses = []string{StatusValidating, StatusInProgress, StatusFinalizing, StatusCancelling}

// Terminal reports whether status is final: failed, completed, expired or
// cancelled.
func Terminal(status string) bool {
	switch status {
	case StatusFailed, StatusCompleted, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// StampOf returns the timestamp field of b that entering status sets, nil
// for a status without one (validating).
func StampOf(b *Batch, status string) *int64 {
	switch status {
	case StatusInProgress:
		return &b.InProgressAt
	case StatusFinalizing:
		return &b.FinalizingAt
	case StatusCompleted:
		return &b.CompletedAt
	case StatusFailed:
		return &b.FailedAt
	case StatusExpired:
		return &b.ExpiredAt
	case StatusCancelling:
		return &b.CancellingAt
	case StatusCancelled:
		return &b.CancelledAt
	}
	return nil
}

// Batch is a stored batch. Timestamps are Unix seconds, 0 when unset.
type Batch struct {
	ID, Owner, Endpoint, Model, InputFileID, CompletionWindow, Status string
	OutputFileID, ErrorFileID                                         string
	Errors                                                            []BatchError
	CreatedAt, InProgressAt, ExpiresAt, FinalizingAt, CompletedAt     int64
	FailedAt, ExpiredAt, CancellingAt, CancelledAt                    int64
	Counts                                                            Counts
	Metadata                                                          map[string]string
	// OutputExpiresAfter is the retention of the output and error files in
	// seconds, 0 for the default.
	OutputExpiresAfter int64
	// Lines is the input's request lines counted at create time (stored,
	// not read back: only the allowance check sums it).
	Lines int64
}

// BatchError is one entry of a failed batch's errors.data.
type BatchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// Counts are a batch's progress: request_counts and usage.
type Counts struct {
	Total, Completed, Failed                                              int64
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens, TotalTokens int64
}

// Errors of a Store.
var (
	ErrNotFound  = errors.New("batches: not found")
	ErrLimit     = errors.New("batches: too many active batches")
	ErrAllowance = errors.New("batches: daily line allowance reached")
	ErrBadCursor = errors.New("batches: unknown cursor")
)

// Allowance is an owner's daily batch line allowance, as Create checks it.
type Allowance struct {
	// LinesPerDay is the most lines the owner's batches created in any
	// AllowanceWindow seconds may hold; 0 or less: no allowance is checked.
	LinesPerDay int64
	// Used and ResetAt are filled in when Create refuses a batch: the
	// lines counted in the window, and when (Unix seconds) enough of them
	// leave it for the batch to fit.
	Used    int64
	ResetAt int64
}

// AllowanceWindow is the rolling window of the daily line allowance, in
// seconds.
const AllowanceWindow = 24 * 3600

// WindowEntry is one batch inside an owner's allowance window: when it was
// created and its lines.
type WindowEntry struct{ CreatedAt, Lines int64 }

// FitAllowance is the allowance arithmetic every Store shares: given the
// entries of b.Owner's batches that count in the window ending at
// b.CreatedAt (oldest first), it returns nil if b's lines fit in
// al.LinesPerDay, or ErrAllowance with al.Used and al.ResetAt set: ResetAt
// is when enough of the oldest entries leave the window for b to fit.
func FitAllowance(b Batch, window []WindowEntry, al *Allowance) error {
	var used int64
	for _, e := range window {
		used += e.Lines
	}
	if used+b.Lines <= al.LinesPerDay {
		return nil
	}
	al.Used, al.ResetAt = used, b.CreatedAt+AllowanceWindow
	left := used
	for _, e := range window {
		left -= e.Lines
		if left+b.Lines <= al.LinesPerDay {
			al.ResetAt = e.CreatedAt + AllowanceWindow
			break
		}
	}
	return ErrAllowance
}
