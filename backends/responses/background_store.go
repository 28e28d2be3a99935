package responses

import (
	"context"
	"errors"
	"time"
)

// BackgroundStore keeps background responses while they run (background.go):
// each run's request, its state for polling, the stream events it recorded,
// and the lease of the replica running it. It sees only sealed content
// (Run.Request, Input, Messages, Snapshot and every Event.Data are sealed
// under the run's data key, Run.Key, which it keeps wrapped beside them).
// SQLite (OpenSQLiteBackgroundStore) serves one node, Postgres
// (OpenPostgresBackgroundStore) a fleet; responsestest.RunBackground is the
// conformance suite both pass.
//
// A run is unfinished (queued, in_progress) until one Advance to a terminal
// status (completed, incomplete, failed) or one Cancel ends it; exactly one
// of them succeeds, and the Service has stored the final Response before
// either. Every write by a runner is conditional on its live lease, so a
// replica that lost its lease (it paused past it, another took the run
// over) cannot write into the run any more. Implementations are safe for
// concurrent use.
type BackgroundStore interface {
	// Create stores a new run with its first events, unless owner already
	// has maxActive unfinished runs: then ErrTooManyRuns.
	Create(ctx context.Context, r BackgroundRun, maxActive int) error
	// Get returns owner's run id (its events left out), or ErrNotFound.
	Get(ctx context.Context, owner, id string) (BackgroundRun, error)
	// Claim leases to replica, for lease, the oldest unfinished run
	// without a live lease, counting an attempt. ok is false when there is
	// none.
	Claim(ctx context.Context, replica string, lease time.Duration) (r BackgroundRun, ok bool, err error)
	// Renew extends replica's live lease on id; false when the lease is
	// lost (expired, taken over, the run ended or was deleted).
	Renew(ctx context.Context, id, replica string, lease time.Duration) (bool, error)
	// Advance records a runner's progress under its live lease: the events
	// (numbered on from the run's last), and, when set, a new status and
	// snapshot. A terminal status ends the run and its lease. false (and
	// nothing written) when the lease is lost or the run has ended.
	Advance(ctx context.Context, id, replica string, a Advance) (bool, error)
	// Cancel ends owner's unfinished run id as cancelled, with snapshot,
	// whoever holds its lease. false when it had already ended;
	// ErrNotFound when there is no such run.
	Cancel(ctx context.Context, owner, id string, snapshot []byte) (bool, error)
	// Events returns up to limit events of owner's run id after sequence
	// number after, in order.
	Events(ctx context.Context, owner, id string, after int64, limit int) ([]Event, error)
	// Release gives up replica's leases on unfinished runs: id's, or all
	// of them when id is "".
	Release(ctx context.Context, id, replica string) error
	// Delete deletes owner's run id and its events; ErrNotFound when
	// there is none.
	Delete(ctx context.Context, owner, id string) error
	// Sweep deletes the ended runs created before before (and their
	// events), and reports how many.
	Sweep(ctx context.Context, before time.Time) (int64, error)
	Close() error
}

// BackgroundRun is one background response as a BackgroundStore keeps it.
type BackgroundRun struct {
	ID, Owner string
	CreatedAt time.Time
	// Status is queued, in_progress, or the terminal status.
	Status string
	// Stream: the run records its events.
	Stream bool
	// Attempts counts the claims of the run (1 on its first run).
	Attempts int
	// NextSeq is the sequence number of the next event.
	NextSeq int64
	// Sealed: the create request's body, its normalized input items, the
	// chat messages the run starts from, and the Response as it stands.
	Request, Input, Messages, Snapshot []byte
	// Key is the run's wrapped data key.
	Key []byte
	// Events are the run's first events (Create only).
	Events []Event
}

// Event is one recorded stream event: its sequence number and its SSE
// frame, sealed.
type Event struct {
	Seq  int64
	Data []byte
}

// Advance is a runner's step (BackgroundStore.Advance).
type Advance struct {
	Events []Event
	// Status, when set, replaces the run's; Snapshot, when set, too.
	Status   string
	Snapshot []byte
}

// ErrTooManyRuns refuses a run past the owner's bound of unfinished runs.
var ErrTooManyRuns = errors.New("responses: too many background responses")

// terminalStatus reports whether a run in status st has ended.
func terminalStatus(st string) bool {
	switch st {
	case "queued", "in_progress":
		return false
	}
	return true
}
