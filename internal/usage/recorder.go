package usage

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Recorder defaults.
const (
	// DefaultFlushInterval is how often the aggregate is written: also the
	// most a crash can lose.
	DefaultFlushInterval = 5 * time.Second
	// DefaultMaxRows bounds the rows held between flushes (one per day,
	// key and model seen). Reaching it starts a flush at once; rows beyond
	// it while the store keeps failing are dropped and logged.
	DefaultMaxRows = 100_000
	// DefaultReloadInterval is how often the month's spend is read back
	// from the store, to see what other processes sharing it spent. This
	// process's own spend is always counted at once.
	DefaultReloadInterval = time.Minute
)

// Event is the usage of one request.
type Event struct {
	Time           time.Time
	KeyID, LimitID string
	Model          string
	// Input includes Cached, as in OpenAI's usage.
	Input, Cached, Output int64
	CostMicros            int64
	// Error: the request was answered with a 4xx or 5xx.
	Error bool
}

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	FlushInterval time.Duration // DefaultFlushInterval if 0
	MaxRows       int           // DefaultMaxRows if 0
	// ReloadInterval: DefaultReloadInterval if 0.
	ReloadInterval time.Duration
	Logger         *slog.Logger
}

type rowKey struct{ day, keyID, model string }

type spendKey struct{ month, limitID string }

// Recorder aggregates events in memory and writes them to a Store. It is
// safe for concurrent use.
type Recorder struct {
	store    Store
	interval time.Duration
	maxRows  int
	log      *slog.Logger
	// reloadEvery and lastReload (guarded by flushMu) pace reload.
	reloadEvery time.Duration
	lastReload  time.Time

	// flushMu serialises flushes (and the spend reload after each), so a
	// reload never misses rows that are neither pending nor stored yet.
	flushMu sync.Mutex

	mu sync.Mutex
	// pending are the rows recorded since the last flush began.
	pending map[rowKey]*Row
	// spend is the month-to-date spend by month and limit id: stored
	// (as of the last reload) plus recorded since.
	spend     map[spendKey]int64
	dropped   int64
	full      chan struct{} // a flush is wanted now
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	started   bool // set by Start, before any Close
}

// NewRecorder returns a Recorder writing to store, with the current
// month's spend loaded from it. Call Start to flush periodically and Close to
// write what is left.
func NewRecorder(ctx context.Context, store Store, opts RecorderOptions) (*Recorder, error) {
	r := &Recorder{store: store, interval: opts.FlushInterval, maxRows: opts.MaxRows, log: opts.Logger, reloadEvery: opts.ReloadInterval,
		pending: map[rowKey]*Row{}, spend: map[spendKey]int64{},
		full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if r.interval <= 0 {
		r.interval = DefaultFlushInterval
	}
	if r.maxRows <= 0 {
		r.maxRows = DefaultMaxRows
	}
	if r.reloadEvery <= 0 {
		r.reloadEvery = DefaultReloadInterval
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if err := r.reload(ctx, time.Now()); err != nil {
		return nil, err
	}
	return r, nil
}

// Record adds one request's usage to the aggregate. It never blocks on the
// store.
func (r *Recorder) Record(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	t := e.Time.UTC()
	k := rowKey{day: t.Format(DayLayout), keyID: e.KeyID, model: e.Model}
	r.mu.Lock()
	defer r.mu.Unlock()
	row := r.pending[k]
	if row == nil {
		if len(r.pending) >= r.maxRows {
			r.dropped++
			r.wantFlush()
			return
		}
		row = &Row{Day: k.day, KeyID: e.KeyID, LimitID: e.LimitID, Model: e.Model}
		r.pending[k] = row
		if len(r.pending) >= r.maxRows {
			r.wantFlush()
		}
	}
	row.Requests++
	row.InputTokens += e.Input
	row.CachedTokens += e.Cached
	row.OutputTokens += e.Output
	row.CostMicros += e.CostMicros
	if e.Error {
		row.Errors++
	}
	if e.CostMicros != 0 {
		r.spend[spendKey{MonthStart(t), e.LimitID}] += e.CostMicros
	}
}

func (r *Recorder) wantFlush() {
	select {
	case r.full <- struct{}{}:
	default:
	}
}

// MonthSpend is the spend in micro-dollars of limitID in now's month (UTC):
// what the store held at the last flush plus everything this Recorder has
// recorded since.
func (r *Recorder) MonthSpend(limitID string, now time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spend[spendKey{MonthStart(now), limitID}]
}

// Flush writes the aggregate to the store in one transaction. On failure
// the rows are kept (merged with those recorded meanwhile) for the next
// flush.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	batch := r.pending
	dropped := r.dropped
	r.pending, r.dropped = map[rowKey]*Row{}, 0
	r.mu.Unlock()
	if dropped > 0 {
		r.log.Error("usage: aggregate full while the store failed; requests not counted", "dropped", dropped)
	}
	if len(batch) > 0 {
		rows := make([]Row, 0, len(batch))
		for _, row := range batch {
			rows = append(rows, *row)
		}
		if err := r.store.Add(ctx, rows); err != nil {
			r.mu.Lock()
			for k, row := range batch {
				if p := r.pending[k]; p != nil {
					row.add(p)
				}
				r.pending[k] = row
			}
			r.mu.Unlock()
			return fmt.Errorf("usage: flush: %w", err)
		}
	}
	// Other processes sharing the store may have spent too. (This
	// process's spend needs no reload: Record counted it.)
	if now := time.Now(); now.Sub(r.lastReload) >= r.reloadEvery || MonthStart(now) != MonthStart(r.lastReload) {
		if err := r.reload(ctx, now); err != nil {
			r.log.Warn("usage: reloading month spend failed; using this process's counts", "error", err)
		}
	}
	return nil
}

// reload sets the month's spend to the store's plus what is pending. The
// caller holds flushMu (or no flush can run yet).
func (r *Recorder) reload(ctx context.Context, now time.Time) error {
	month := MonthStart(now)
	stored, err := r.store.MonthSpend(ctx, month)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	spend := make(map[spendKey]int64, len(stored))
	for id, n := range stored {
		spend[spendKey{month, id}] = n
	}
	for k, row := range r.pending {
		if row.CostMicros != 0 {
			t, _ := time.Parse(DayLayout, k.day)
			spend[spendKey{MonthStart(t), row.LimitID}] += row.CostMicros
		}
	}
	r.spend = spend
	r.lastReload = now
	return nil
}

// Query flushes, so the answer includes everything recorded until now,
// then reads the store.
func (r *Recorder) Query(ctx context.Context, q Query) ([]Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := r.Flush(ctx); err != nil {
		r.log.Warn("usage: flush before a read failed; the answer lacks the last seconds", "error", err)
	}
	return r.store.Query(ctx, q)
}

// Start flushes every flush interval (sooner when the aggregate is full),
// in a goroutine, until Close.
func (r *Recorder) Start() {
	r.started = true
	go r.run()
}

func (r *Recorder) run() {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.full:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.interval)
		if err := r.Flush(ctx); err != nil {
			r.log.Warn("usage: flush failed; retrying at the next interval", "error", err)
		}
		cancel()
	}
}

// Close stops the flushes Start began and writes what is left. The store
// stays open: its owner closes it.
func (r *Recorder) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { close(r.stop) })
	if r.started {
		<-r.done
	}
	return r.Flush(ctx)
}

var _ Reader = (*Recorder)(nil)
