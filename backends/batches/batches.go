// Package batches owns /v1/batches, OpenAI's Batch API: creating, getting,
// listing and cancelling batches, and the runner that executes them. A batch
// is kept in a Store (store.go; by default SQLite, DATA_DIR/batches.db, its
// own file; PostgresStore in fleet mode); while it runs, each line's result
// is recorded in a Results (results.go: by default spool files under
// DATA_DIR/batches/<id>/, local to this process, spool.go; PostgresResults
// in fleet mode), and the results become batch_output files in the files
// store when it ends. A runner runs the batches it claims with a lease
// (Store.Claim), renewed while it runs, so any replica can run any batch
// and another takes a dead one's over.
//
// The runner streams the input file twice: once to validate it (the set of
// custom_ids, hashed, is the only per-line state kept) and once to send each
// line's body, byte for byte, through the gateway on behalf of the owner
// (origin batch), with a per-batch and a global concurrency limit. It reads
// the input through a snapshot in the spool directory (a copy of its
// content, made when the batch is first read), so a batch that has started is
// not affected by its input file being deleted or expiring. It resumes after
// a restart (or on another replica, with shared Results) from the recorded
// results, so a line whose result was recorded is never sent again. docs/backends-design.md is the contract:
// limits, errors, lifecycle and the output line shape.
package batches

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
)

// FileStore is the part of the files store (*files.Store) batches use: the
// input file is checked and read through it, and the spool files become
// batch_output files through it.
type FileStore interface {
	Get(ctx context.Context, owner, id string) (files.File, error)
	Open(ctx context.Context, owner, id string) (files.File, files.Content, error)
	Create(ctx context.Context, owner string, meta files.File, r io.Reader, maxBytes int64) (files.File, error)
}

// Gateway sends one request through the gateway on behalf of owner;
// *onbehalf.Client satisfies it. A non-2xx status is an answer, not an
// error; an error means no answer came.
type Gateway interface {
	Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error)
}

// Limits of the Batch API (docs/backends-design.md).
const (
	// DefaultMaxLines is the most requests one input file may hold.
	DefaultMaxLines = 50_000
	// MaxActive is how many batches an owner may have that are not in a
	// terminal state.
	MaxActive = 10
	// completionWindow is the only window accepted, and how long a batch
	// has before it expires.
	completionWindow    = "24h"
	completionWindowDur = 24 * time.Hour
	// outputRetention is how long batch output and error files are kept
	// unless the request's output_expires_after says otherwise.
	outputRetention = 30 * 24 * time.Hour
	// maxValidationErrors caps errors.data: a file with a systematic
	// mistake would otherwise repeat it 50,000 times in the batch object.
	maxValidationErrors = 1000
)

// Options configure a Service. DataDir, Files and Gateway are required; for
// the other fields the zero value means the default.
type Options struct {
	// DataDir holds the spool directory batches/ (local scratch, spool.go)
	// and, when Store is nil, batches.db.
	DataDir string
	// Store keeps the batches (default: the SQLite store in
	// DataDir/batches.db, OpenSQLiteStore). The Service closes it.
	Store Store
	// Files is where input files are read and output files stored
	// (*files.Store).
	Files FileStore
	// Gateway sends the lines (*onbehalf.Client).
	Gateway Gateway
	// Results keeps the lines' results while a batch runs (default: the
	// local spool files under DataDir/batches/, which only this process
	// reads). A shared implementation (PostgresResults) lets any replica
	// resume a batch without sending a recorded line again.
	Results Results
	// ReplicaID names this runner in the leases it takes on the batches it
	// runs (Store.Claim). Empty: "local" when Results is the local spool
	// (one node: a restarted process takes its predecessor's leases back
	// at once), otherwise a name unique to this process (host, pid and a
	// random suffix), whose leases another replica takes over once they
	// expire.
	ReplicaID string
	// Lease is how long a claimed batch stays this runner's without a
	// renewal (default 30 s); it is renewed every Lease/3 while the batch
	// runs. A dead replica's batches are taken over by another after at
	// most Lease plus ClaimInterval.
	Lease time.Duration
	// ClaimInterval is how often the runner looks for batches to claim:
	// ones created on other replicas and ones whose lease expired
	// (default 2 s). A batch created through this Service is claimed at
	// once.
	ClaimInterval time.Duration

	// Concurrency is how many lines of one batch are in flight at once
	// (default 64).
	Concurrency int
	// GlobalConcurrency is how many lines of all batches together are in
	// flight at once (default 256), so a few large batches cannot open an
	// unbounded number of connections to the gateway.
	GlobalConcurrency int
	// MaxInFlightBytes bounds the request bodies and custom_ids held in memory by lines in
	// flight, across all batches (default 256 MiB). Lines are small in the
	// common case and concurrency bounds them; this bounds the case of
	// lines of several megabytes each. A second budget of the same size
	// bounds the answers over 64 KiB being read and recorded, each counted
	// twice (the answer and its output line) at its Content-Length, or at
	// MaxResponseBytes while its length is unknown. Answers up to 64 KiB
	// are bounded by GlobalConcurrency instead.
	MaxInFlightBytes int64
	// MaxLines is the most request lines an input file may have (default
	// DefaultMaxLines).
	MaxLines int
	// MaxLineBytes is the longest input line accepted (default 64 MiB).
	MaxLineBytes int
	// MaxResponseBytes is the largest gateway answer recorded for one line
	// (default 64 MiB); a longer one is recorded as an error.
	MaxResponseBytes int64
	// MaxRetries is how many times a line is retried after the gateway
	// could not be reached or answered 429 or 5xx (default 3; negative:
	// none). The gateway already fails over between providers; this rides
	// out a brief outage of all of them.
	MaxRetries int
	// RetryBackoff is the first wait before a retry, doubled for each
	// further one (default 1 s); a retry-after header, up to
	// maxRetryAfter, is honoured when longer.
	RetryBackoff time.Duration
	// RequestTimeout bounds one attempt of one line (default 10 min).
	RequestTimeout time.Duration
	// ProgressInterval is how often a running batch's counters are written
	// to the database and its expiry checked (default 250 ms). Results are
	// counted in memory in between: one SQLite write per line would make
	// the database the bottleneck.
	ProgressInterval time.Duration
	// RestartDelay is how long the runner waits before retrying a batch
	// whose processing failed on an internal error, such as a full disk
	// (default 1 min).
	RestartDelay time.Duration
	// Now is the clock (default time.Now); tests move it to expire batches.
	Now func() time.Time
	// LinesPerDay is a tier's daily batch line allowance: the most request
	// lines the batches an owner creates in any 24 hours may hold, and
	// whether there is one (config.Tier.BatchLineAllowance). Nil: none is
	// checked.
	LinesPerDay func(tier string) (lines int64, limited bool)
	// After times a run's pauses while its owner's tokens per minute are
	// spent (default time.After); tests pass one that moves their rate
	// limiter's clock instead of waiting.
	After  func(time.Duration) <-chan time.Time
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.GlobalConcurrency <= 0 {
		o.GlobalConcurrency = 256
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = 256 << 20
	}
	if o.MaxLines <= 0 {
		o.MaxLines = DefaultMaxLines
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 64 << 20
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 64 << 20
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 3
	} else if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Minute
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 250 * time.Millisecond
	}
	if o.RestartDelay <= 0 {
		o.RestartDelay = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.ClaimInterval <= 0 {
		o.ClaimInterval = 2 * time.Second
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Service is the Batch API and its runner. Handler serves the API; Run
// executes batches until its context ends. It is safe for concurrent use.
type Service struct {
	store Store
	files FileStore
	gw    Gateway
	opts  Options
	log   *slog.Logger
	// spoolDir holds one directory of spool files per running batch.
	spoolDir string
	// results keeps the lines' results; local is it when it is the spool.
	results Results
	local   *localResults
	// replicaID names this runner's leases; stableReplica: it is the same
	// across restarts, so Run takes its leases back at start.
	replicaID     string
	stableReplica bool
	wake          chan struct{}

	// global bounds lines in flight across batches (GlobalConcurrency);
	// bytes bounds their bodies (MaxInFlightBytes), answers their large
	// answers (the same size).
	global  chan struct{}
	bytes   *byteBudget
	answers *byteBudget

	mu sync.Mutex
	// runCtx is Run's context while Run is active, nil otherwise: a batch
	// created while no runner is active waits for the next Run.
	runCtx context.Context
	jobs   map[string]*job
	wg     sync.WaitGroup
}

// New opens (creating if necessary) the batch store in opts.DataDir. Call
// Run to execute batches.
func New(ctx context.Context, opts Options) (*Service, error) {
	if opts.Files == nil || opts.Gateway == nil {
		return nil, errors.New("batches: a file store and a gateway are required")
	}
	opts.defaults()
	if opts.DataDir == "" {
		return nil, errors.New("batches: open: empty data directory")
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("batches: open: %w", err)
	}
	st := opts.Store
	if st == nil {
		if st, err = OpenSQLiteStore(ctx, dir); err != nil {
			return nil, err
		}
	}
	spool := filepath.Join(dir, "batches")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		st.Close()
		return nil, fmt.Errorf("batches: open: %w", err)
	}
	s := &Service{
		store:     st,
		files:     opts.Files,
		gw:        opts.Gateway,
		opts:      opts,
		log:       opts.Logger,
		spoolDir:  spool,
		results:   opts.Results,
		replicaID: opts.ReplicaID,
		wake:      make(chan struct{}, 1),
		global:    make(chan struct{}, opts.GlobalConcurrency),
		bytes:     newByteBudget(opts.MaxInFlightBytes),
		answers:   newByteBudget(opts.MaxInFlightBytes),
		jobs:      map[string]*job{},
	}
	if s.results == nil {
		s.local = newLocalResults(s.spoolPath, s.maxSpoolLine())
		s.results = s.local
	}
	if s.replicaID == "" {
		if s.local != nil {
			s.replicaID, s.stableReplica = "local", true
		} else {
			host, _ := os.Hostname()
			s.replicaID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newID(""))
		}
	}
	return s, nil
}

// Close closes the store. Run must have returned.
func (s *Service) Close() error {
	return s.store.Close()
}
