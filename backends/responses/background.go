package responses

// Background responses (background: true). The create request answers at
// once with the Response queued; the run is kept in a BackgroundStore and
// executed by whichever replica claims it, under a lease it renews, detached
// from the client: a client that hangs up, or never streamed, loses nothing.
//
//   - A run records its progress with BackgroundStore.Advance, each write
//     conditional on its lease. At its end the runner first puts the final
//     Response in the responses Store, as a foreground one is stored, then
//     ends the run. The insert of the id is the arbiter: a cancel stores its
//     cancelled Response the same way, and whichever is first has ended the
//     run; the other stops. A runner that dies between the two leaves a
//     stored Response and an unfinished run: the next claim ends the run
//     from the stored Response (and, when streamed, records its terminal
//     event), without running it again.
//   - If the runner dies (or loses its lease) before storing, another
//     replica (or this one, restarted) claims the run once the lease has
//     expired and runs it again from the start: the model is asked again
//     (those tokens are charged again), and a stream continues its sequence
//     numbers with a response.in_progress event whose Response has no
//     output yet, followed by the new attempt's events (output indexes
//     start again at 0). The final Response is stored once.
//   - Streamed runs keep their events (SSE frames, sealed), so
//     GET /v1/responses/{id}?stream=true&starting_after=N resumes on any
//     replica: events after N as recorded, then live ones as they are
//     recorded (this replica's at once, others' within PollInterval).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sse"
)

// BackgroundOptions configures background responses. The zero value is the
// defaults, with the SQLite store in Options.DataDir.
type BackgroundOptions struct {
	// Store keeps the runs (default: SQLite in DataDir/responses.db,
	// OpenSQLiteBackgroundStore). The Service closes it. Without it and
	// without a DataDir, background requests are refused with a 400.
	Store BackgroundStore
	// ReplicaID names this process in its leases. Empty: "local" with the
	// default SQLite store (one node: a restarted process takes its
	// predecessor's runs back at once), otherwise one unique to this
	// process, whose runs others take over once its leases expire.
	ReplicaID string
	// Lease is how long a claimed run stays this replica's without a
	// renewal (default DefaultBackgroundLease); renewed every Lease/3. A
	// dead replica's runs are taken over after at most Lease plus
	// ClaimInterval.
	Lease time.Duration
	// ClaimInterval is how often runs created elsewhere, or whose lease
	// expired, are looked for (default 2 s). A run created here is
	// claimed at once.
	ClaimInterval time.Duration
	// PollInterval is how often a stream follows a run another replica
	// records (default 250 ms).
	PollInterval time.Duration
	// MaxPerOwner bounds an owner's unfinished background responses
	// (default DefaultMaxBackgroundPerOwner); past it, a create gets 429.
	MaxPerOwner int
	// MaxRunning bounds the runs this replica executes at once (default
	// 64); others wait for a replica with room.
	MaxRunning int
	// EventRetention is how long a finished run and its stream events are
	// kept after its creation for resuming (default 24 h). The Response
	// itself stays for Retention.
	EventRetention time.Duration
}

// Defaults of BackgroundOptions.
const (
	DefaultBackgroundLease       = 30 * time.Second
	DefaultMaxBackgroundPerOwner = 16
)

// background runs this replica's share of the background responses.
type background struct {
	s       *Service
	store   BackgroundStore
	keys    *envelope.Keyring
	opts    BackgroundOptions
	replica string
	stable  bool

	wake chan struct{}
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	jobs    map[string]context.CancelFunc
	changed chan struct{} // closed (and replaced) when this replica records
	jobsWG  sync.WaitGroup
}

// newBackground opens the store and starts the claim loop; nil (background
// refused) without a store or a data directory.
func newBackground(ctx context.Context, s *Service, opts Options) (*background, error) {
	o := opts.Background
	st := o.Store
	stable := false
	if st == nil {
		if opts.DataDir == "" {
			return nil, nil
		}
		var err error
		if st, err = OpenSQLiteBackgroundStore(ctx, opts.DataDir); err != nil {
			return nil, err
		}
		stable = true
	}
	if o.ReplicaID == "" {
		if stable {
			o.ReplicaID = "local"
		} else {
			host, _ := os.Hostname()
			o.ReplicaID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), s.newID("")[:8])
		}
	} else {
		stable = false
	}
	if o.Lease <= 0 {
		o.Lease = DefaultBackgroundLease
	}
	if o.ClaimInterval <= 0 {
		o.ClaimInterval = 2 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.MaxPerOwner <= 0 {
		o.MaxPerOwner = DefaultMaxBackgroundPerOwner
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = 64
	}
	if o.EventRetention <= 0 {
		o.EventRetention = 24 * time.Hour
	}
	b := &background{s: s, store: st, keys: s.store.keys, opts: o, replica: o.ReplicaID, stable: stable,
		wake: make(chan struct{}, 1), done: make(chan struct{}), jobs: map[string]context.CancelFunc{},
		changed: make(chan struct{})}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = cancel
	go b.loop(rctx)
	return b, nil
}

// close stops the claim loop and the runs (abandoned: their leases are
// released for another replica, or the next start) and closes the store.
func (b *background) close() {
	if b == nil {
		return
	}
	b.stop()
	<-b.done
	_ = b.store.Close()
}

func (b *background) loop(ctx context.Context) {
	defer close(b.done)
	defer b.jobsWG.Wait()
	if b.stable {
		// Leases this replica id holds are a previous process's.
		if err := b.store.Release(ctx, "", b.replica); err != nil && ctx.Err() == nil {
			b.s.log.Warn("responses: releasing a previous run's background leases failed", "err", err)
		}
	}
	claim := time.NewTicker(b.opts.ClaimInterval)
	defer claim.Stop()
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	b.sweep(ctx)
	for {
		b.claimAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-claim.C:
		case <-b.wake:
		case <-sweep.C:
			b.sweep(ctx)
		}
	}
}

func (b *background) sweep(ctx context.Context) {
	n, err := b.store.Sweep(ctx, b.s.now().Add(-b.opts.EventRetention))
	if err != nil && ctx.Err() == nil {
		b.s.log.Error("responses: background sweep failed", "err", err)
	}
	if n > 0 {
		b.s.log.Info("responses: finished background runs deleted", "count", n)
	}
}

func (b *background) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// broadcast wakes the streams following this replica's runs.
func (b *background) broadcast() {
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

func (b *background) changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

func (b *background) claimAll(ctx context.Context) {
	for ctx.Err() == nil {
		b.mu.Lock()
		full := len(b.jobs) >= b.opts.MaxRunning
		b.mu.Unlock()
		if full {
			return
		}
		run, ok, err := b.store.Claim(ctx, b.replica, b.opts.Lease)
		if err != nil {
			if ctx.Err() == nil {
				b.s.log.Warn("responses: claiming background runs failed", "err", err)
			}
			return
		}
		if !ok {
			return
		}
		b.start(ctx, run)
	}
}

// start executes run until it ends or its lease is lost.
func (b *background) start(ctx context.Context, run BackgroundRun) {
	jctx, cancel := context.WithCancel(ctx)
	b.mu.Lock()
	if _, ok := b.jobs[run.ID]; ok {
		b.mu.Unlock()
		cancel()
		return
	}
	b.jobs[run.ID] = cancel
	b.mu.Unlock()
	b.jobsWG.Add(1)
	go func() {
		defer b.jobsWG.Done()
		held := make(chan struct{})
		go func() {
			defer close(held)
			b.holdLease(jctx, cancel, run.ID)
		}()
		keep := b.exec(jctx, run)
		cancel()
		<-held
		b.mu.Lock()
		delete(b.jobs, run.ID)
		b.mu.Unlock()
		if keep {
			return // claimed again when the lease expires, not at once
		}
		// An unfinished run (this replica is stopping) is another's at once.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		if err := b.store.Release(rctx, run.ID, b.replica); err != nil {
			b.s.log.Warn("responses: releasing a background lease failed", "response", run.ID, "err", err)
		}
		b.poke() // room for another run
	}()
}

// holdLease renews the lease every Lease/3, and stops the run when it is
// lost (cancelled, deleted, taken over) or could not be renewed for a
// whole Lease: another replica may have it by then.
func (b *background) holdLease(ctx context.Context, stop context.CancelFunc, id string) {
	t := time.NewTicker(max(b.opts.Lease/3, time.Millisecond))
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := b.store.Renew(ctx, id, b.replica, b.opts.Lease)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			b.s.log.Warn("responses: renewing a background lease failed", "response", id, "err", err)
			if time.Since(renewed) >= b.opts.Lease {
				stop()
				return
			}
		case !ok:
			b.s.log.Info("responses: background run ended elsewhere or lost its lease; stopping it here", "response", id)
			stop()
			return
		default:
			renewed = time.Now()
		}
	}
}

// interrupt stops run id if it executes here (it was cancelled or deleted).
func (b *background) interrupt(id string) {
	b.mu.Lock()
	cancel := b.jobs[id]
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Sealed fields of a background run.
const (
	bgFieldRequest  = "request"
	bgFieldInput    = "input"
	bgFieldMessages = "messages"
	bgFieldSnapshot = "snapshot"
	bgFieldEvent    = "event"
)

// bgKeyID is the object id a run's data key is bound to: not the
// response's own, whose stored Response has a key of its own.
func bgKeyID(id string) string { return "background:" + id }

// opened is a run's sealed content, in the clear.
type opened struct {
	dk                                 *envelope.DataKey
	request, input, messages, snapshot []byte
}

func (b *background) open(run BackgroundRun) (*opened, error) {
	dk, err := b.keys.Unwrap(bgKeyID(run.ID), run.Key)
	if err != nil {
		return nil, fmt.Errorf("responses: background %s: %w", run.ID, err)
	}
	o := &opened{dk: dk}
	for _, f := range []struct {
		name string
		src  []byte
		dst  *[]byte
	}{{bgFieldRequest, run.Request, &o.request}, {bgFieldInput, run.Input, &o.input},
		{bgFieldMessages, run.Messages, &o.messages}, {bgFieldSnapshot, run.Snapshot, &o.snapshot}} {
		if f.src == nil {
			continue
		}
		if *f.dst, err = dk.Open(f.name, f.src); err != nil {
			return nil, fmt.Errorf("responses: background %s: %w", run.ID, err)
		}
	}
	return o, nil
}

// eventLog is the http.ResponseWriter a background run's eventWriter
// writes to: each Write is one SSE frame, sealed and kept pending until
// the flusher (or the run's next Advance) records it.
type eventLog struct {
	dk  *envelope.DataKey
	hdr http.Header

	mu      sync.Mutex
	seq     int64
	pending []Event
	err     error
	kick    chan struct{}
}

func newEventLog(dk *envelope.DataKey, next int64) *eventLog {
	return &eventLog{dk: dk, hdr: http.Header{}, seq: next, kick: make(chan struct{}, 1)}
}

func (r *eventLog) Header() http.Header { return r.hdr }
func (r *eventLog) WriteHeader(int)     {}

func (r *eventLog) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.pending = append(r.pending, Event{Seq: r.seq, Data: r.dk.Seal(bgFieldEvent, p)})
	r.seq++
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return len(p), nil
}

// FlushError makes the eventWriter stop once recording failed: the run's
// stream then reads as a client gone, and the run is abandoned.
func (r *eventLog) FlushError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *eventLog) take() []Event {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.pending
	r.pending = nil
	return evs
}

func (r *eventLog) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *eventLog) failed() bool {
	return r != nil && r.FlushError() != nil
}

// maxBackgroundAttempts bounds how many times a run is started: past it,
// a run taken over again fails.
const maxBackgroundAttempts = 3

// errLeaseLost stops a run that can no longer record its progress.
var errLeaseLost = errors.New("responses: background lease lost")

// flush records r's pending events as they come, one Advance each batch
// (what arrives during one write goes in the next), until stop is closed;
// a write in progress then completes, so no event is lost between it and
// the run's next Advance.
func (b *background) flush(ctx context.Context, id string, r *eventLog, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		evs := r.take()
		if len(evs) == 0 {
			continue
		}
		if !b.advance(ctx, id, Advance{Events: evs}) {
			r.fail(errLeaseLost)
			return
		}
	}
}

// advance records a step of run id; false when the run cannot go on here.
func (b *background) advance(ctx context.Context, id string, a Advance) bool {
	ok, err := b.store.Advance(ctx, id, b.replica, a)
	if err != nil {
		if ctx.Err() == nil {
			b.s.log.Warn("responses: recording a background run failed; it will run again", "response", id, "err", err)
		}
		return false
	}
	if ok {
		b.broadcast()
	}
	return ok
}

// exec executes row (one attempt). A run whose Response is already stored
// (its runner died between storing it and ending the run) is only ended.
// keep: the run cannot be read here; its lease is left to expire rather
// than released, so it is not claimed again at once.
func (b *background) exec(ctx context.Context, row BackgroundRun) (keep bool) {
	log := b.s.log
	o, err := b.open(row)
	if err != nil {
		log.Error("responses: background run unreadable", "response", row.ID, "err", err)
		return true
	}
	if body, err := b.s.store.body(ctx, row.Owner, row.ID, b.s.now()); err == nil {
		b.endStored(ctx, row, o, body)
		return false
	} else if !errors.Is(err, ErrNotFound) {
		log.Warn("responses: background run: reading the stored response failed", "response", row.ID, "err", err)
		return false
	}
	req, aerr := parseCreate(o.request, b.s.newID, true)
	if aerr != nil {
		// It was valid when created: a newer binary refuses it.
		log.Error("responses: background request no longer valid", "response", row.ID, "err", aerr)
		b.failUnrun(ctx, row, o, aerr.Message)
		return false
	}
	req.input = splitItems(o.input)
	ru := &run{s: b.s, owner: row.Owner, req: req, obj: newObject(row.ID, row.CreatedAt.Unix(), req)}
	ru.obj.Background = true
	ru.conv.msgs = splitItems(o.messages)
	var rec *eventLog
	if row.Stream {
		rec = newEventLog(o.dk, row.NextSeq)
		ru.ev = newEventWriter(rec)
		ru.ev.started = true // response.created was recorded at create
		ru.ev.seq = row.NextSeq
	}
	ru.emitResponse("response.in_progress")
	snap := ru.obj.marshal()
	if !b.advance(ctx, row.ID, Advance{Status: "in_progress", Snapshot: o.dk.Seal(bgFieldSnapshot, snap), Events: rec.take()}) {
		return false
	}
	log.Info("responses: background run started", "response", row.ID, "attempt", row.Attempts)
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	if rec != nil {
		go func() {
			defer close(flushed)
			b.flush(ctx, row.ID, rec, stopFlush)
		}()
	} else {
		close(flushed)
	}
	if row.Attempts > maxBackgroundAttempts {
		// A run that keeps losing its replica (one it makes crash, say)
		// must not be retried, and charged, forever.
		err = apierror.Server(http.StatusInternalServerError, "server_error",
			fmt.Sprintf("The response was interrupted %d times before it could finish; it is not run again.", maxBackgroundAttempts))
	} else {
		err = ru.execute(ctx)
	}
	close(stopFlush)
	<-flushed
	if ctx.Err() != nil || rec.failed() {
		log.Info("responses: background run stopped here", "response", row.ID)
		return false
	}
	if err == nil {
		if ru.obj.Status == "in_progress" {
			ru.obj.Status = "completed"
			t := b.s.now().Unix()
			ru.obj.CompletedAt = &t
		}
	} else {
		ru.closeOpen("incomplete")
		ru.obj.Status = "failed"
		ru.obj.Error = failure(err)
		log.Warn("responses: background response failed", "response", row.ID, "err", err)
	}
	u := ru.usage
	ru.obj.Usage = &u
	out := ru.obj.marshal()
	// Stored first: the one insert of the id decides between this runner,
	// a cancel and a runner that lost its lease; and a client that sees
	// the run ended can continue from it at once.
	if !b.storeResponse(ctx, row, out, o.input) {
		return false
	}
	// Only the runner whose insert stored the response appends its turn.
	// A runner that dies between the two leaves the turn out of the
	// conversation (the response itself is kept).
	if err := b.s.appendToConversation(ctx, ru); err != nil {
		log.Warn("responses: background response not added to its conversation", "response", row.ID, "err", err)
	}
	ru.emitResponse(terminalEvent(ru.obj.Status))
	if !b.advance(ctx, row.ID, Advance{Status: ru.obj.Status, Snapshot: o.dk.Seal(bgFieldSnapshot, out), Events: rec.take()}) {
		b.unlessGone(ctx, row)
		return false
	}
	log.Debug("responses: background response finished", "response", row.ID, "status", ru.obj.Status,
		"items", len(ru.obj.Output), "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens)
	return false
}

func terminalEvent(status string) string {
	switch status {
	case "incomplete":
		return "response.incomplete"
	case "failed":
		return "response.failed"
	}
	return "response.completed"
}

// failUnrun ends a run that cannot be run as failed, with msg.
func (b *background) failUnrun(ctx context.Context, row BackgroundRun, o *opened, msg string) {
	var obj responseObject
	if err := json.Unmarshal(o.snapshot, &obj); err != nil {
		b.s.log.Error("responses: background run unreadable", "response", row.ID, "err", err)
		return
	}
	obj.Status = "failed"
	obj.Error = &responseError{Code: "server_error", Message: msg}
	out := obj.marshal()
	if b.storeResponse(ctx, row, out, o.input) {
		b.endStored(ctx, row, o, out)
	}
}

// endStored ends a run whose Response is stored (by a runner that died
// before ending it, or lost its lease): the stored Response is its final
// state, and a streamed run's terminal event.
func (b *background) endStored(ctx context.Context, row BackgroundRun, o *opened, body []byte) {
	status := gjson.GetBytes(body, "status").Str
	a := Advance{Status: status, Snapshot: o.dk.Seal(bgFieldSnapshot, body)}
	if row.Stream && status != "cancelled" {
		rec := newEventLog(o.dk, row.NextSeq)
		ev := newEventWriter(rec)
		ev.started, ev.seq = true, row.NextSeq
		ev.send(terminalEvent(status), func(d []byte) []byte {
			d = append(d, `"response":`...)
			d = append(d, body...)
			return append(d, ',')
		})
		a.Events = rec.take()
	}
	if b.advance(ctx, row.ID, a) {
		b.s.log.Info("responses: background run ended from its stored response", "response", row.ID, "status", status)
	}
}

// storeResponse puts the ended run's Response in the responses Store;
// false when it could not, or another (a cancel, another runner) stored
// the run's Response first.
func (b *background) storeResponse(ctx context.Context, run BackgroundRun, snapshot, input []byte) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var prev string
	if p := gjson.GetBytes(snapshot, "previous_response_id"); p.Type == gjson.String {
		prev = p.Str
	}
	output := []byte(gjson.GetBytes(snapshot, "output").Raw)
	if len(output) == 0 {
		output = []byte("[]")
	}
	err := b.s.store.put(ctx, &stored{ID: run.ID, Owner: run.Owner, PreviousID: prev,
		CreatedAt: run.CreatedAt, ExpiresAt: run.CreatedAt.Add(Retention), Body: snapshot, Input: input, Output: output})
	if err == nil {
		return true
	}
	if _, gerr := b.s.store.body(ctx, run.Owner, run.ID, b.s.now()); gerr == nil {
		b.s.log.Info("responses: background response was stored by another; not storing this one", "response", run.ID)
	} else {
		b.s.log.Error("responses: storing a background response failed", "response", run.ID, "err", err)
	}
	return false
}

// unlessGone deletes the Response just stored for row if row was deleted
// meanwhile: a delete must not be undone by a run finishing after it.
func (b *background) unlessGone(ctx context.Context, row BackgroundRun) {
	ctx = context.WithoutCancel(ctx)
	if _, err := b.store.Get(ctx, row.Owner, row.ID); errors.Is(err, ErrNotFound) {
		_ = b.s.store.delete(ctx, row.Owner, row.ID, b.s.now())
	}
}

// splitItems is a JSON array's elements.
func splitItems(arr []byte) [][]byte {
	var out [][]byte
	gjson.ParseBytes(arr).ForEach(func(_, v gjson.Result) bool {
		out = append(out, []byte(v.Raw))
		return true
	})
	return out
}

// createBackground answers a create with background: true: the run is
// stored queued and the Response returned at once, or (stream: true) its
// events streamed as they are recorded.
func (s *Service) createBackground(w http.ResponseWriter, r *http.Request, ru *run, body []byte) {
	b := s.bg
	if b == nil {
		apierror.InvalidParam("background", "Background responses are not available on this gateway.").Write(w)
		return
	}
	req := ru.req
	if !req.store {
		apierror.InvalidParam("background", "Background responses must be stored: 'background' requires 'store' to be true.").Write(w)
		return
	}
	id := ru.obj.ID
	dk, wrapped, err := b.keys.NewDataKey(bgKeyID(id))
	if err != nil {
		s.internal(w, "background create", err)
		return
	}
	ru.obj.Background = true
	ru.obj.Status = "queued"
	var rec *eventLog
	if req.stream {
		rec = newEventLog(dk, 0)
		ru.ev = newEventWriter(rec)
		ru.ev.started = true
		ru.emitResponse("response.created")
		ru.emitResponse("response.queued")
	}
	snap := ru.obj.marshal()
	br := BackgroundRun{ID: id, Owner: ru.owner, CreatedAt: time.Unix(ru.obj.CreatedAt, 0), Status: "queued", Stream: req.stream,
		Request: dk.Seal(bgFieldRequest, body), Input: dk.Seal(bgFieldInput, joinItems(req.input)),
		Messages: dk.Seal(bgFieldMessages, ru.conv.appendMessages(nil)), Snapshot: dk.Seal(bgFieldSnapshot, snap),
		Key: wrapped, Events: rec.take()}
	br.NextSeq = int64(len(br.Events))
	err = b.store.Create(r.Context(), br, b.opts.MaxPerOwner)
	if errors.Is(err, ErrTooManyRuns) {
		(&apierror.Error{Status: http.StatusTooManyRequests, Type: apierror.TypeRequests, Code: "background_response_limit_exceeded",
			Message: fmt.Sprintf("You have %d background responses queued or in progress, the most this gateway runs at once for a key. "+
				"Wait for one to finish, or cancel one, and try again.", b.opts.MaxPerOwner)}).Write(w)
		return
	}
	if err != nil {
		s.internal(w, "background create", err)
		return
	}
	s.log.Info("responses: background response queued", "response", id, "stream", req.stream)
	b.poke()
	if !req.stream {
		writeJSON(w, http.StatusOK, snap)
		return
	}
	b.tail(w, r, br, -1)
}

// tail streams run's events after sequence number after: those recorded,
// then new ones as they are recorded, until the run has ended. The client
// leaving ends only the stream.
func (b *background) tail(w http.ResponseWriter, r *http.Request, run BackgroundRun, after int64) {
	ctx := r.Context()
	dk, err := b.keys.Unwrap(bgKeyID(run.ID), run.Key)
	if err != nil {
		b.s.internal(w, "background stream", err)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("content-type", "text/event-stream; charset=utf-8")
	h.Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	poll := time.NewTicker(b.opts.PollInterval)
	defer poll.Stop()
	const page = 500
	for {
		changed := b.changes()
		// The status first: a run that has ended has all its events in.
		cur, err := b.store.Get(ctx, run.Owner, run.ID)
		if err != nil {
			b.endStream(ctx, w, rc, run.ID, after+1, err)
			return
		}
		evs, err := b.store.Events(ctx, run.Owner, run.ID, after, page)
		if err != nil {
			b.endStream(ctx, w, rc, run.ID, after+1, err)
			return
		}
		for _, ev := range evs {
			frame, err := dk.Open(bgFieldEvent, ev.Data)
			if err != nil {
				b.endStream(ctx, w, rc, run.ID, ev.Seq, err)
				return
			}
			if _, err := w.Write(frame); err != nil {
				return // the client is gone; the run goes on
			}
			after = ev.Seq
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if len(evs) == page {
			continue
		}
		if terminalStatus(cur.Status) {
			if cur.Status == "cancelled" && after < cur.NextSeq {
				// Cancelled runs record no terminal event: the stream
				// ends with an error the SDKs raise.
				writeErrorEvent(w, cur.NextSeq, "response_cancelled", "The response was cancelled.")
				_ = rc.Flush()
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-poll.C:
		}
	}
}

// endStream ends a stream that cannot go on with an error event.
func (b *background) endStream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, id string, seq int64, err error) {
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, ErrNotFound) {
		writeErrorEvent(w, seq, "not_found", "The response was deleted.")
	} else {
		b.s.log.Error("responses: background stream failed", "response", id, "err", err)
		writeErrorEvent(w, seq, "server_error", "The response's events could not be read.")
	}
	_ = rc.Flush()
}

func writeErrorEvent(w http.ResponseWriter, seq int64, code, msg string) {
	d := []byte(`{"type":"error","code":`)
	d = appendString(d, code)
	d = append(d, `,"message":`...)
	d = appendString(d, msg)
	d = append(d, `,"param":null,"sequence_number":`...)
	d = strconv.AppendInt(d, seq, 10)
	d = append(d, '}')
	_, _ = w.Write(sse.AppendEvent(nil, "error", d))
}

// getBackground answers GET /v1/responses/{id} for a background response
// not yet ended (its state as it stands), and every GET with stream=true;
// false leaves the request to the stored responses. stream and
// starting_after are query parameters, as OpenAI documents them, or members
// of a JSON body, where openai-go's GetStreaming puts stream.
func (s *Service) getBackground(w http.ResponseWriter, r *http.Request, owner, id string) bool {
	stream, after, aerr := streamParams(w, r)
	if aerr != nil {
		aerr.Write(w)
		return true
	}
	var run BackgroundRun
	err := ErrNotFound
	if s.bg != nil {
		run, err = s.bg.store.Get(r.Context(), owner, id)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		s.internal(w, "get", err)
		return true
	}
	found := err == nil
	if stream {
		switch {
		case found && run.Stream:
			s.bg.tail(w, r, run, after)
		case found:
			apierror.InvalidParam("stream", "Response '%s' was created without 'stream': only streamed background responses can be streamed again.", id).Write(w)
		default:
			if _, err := s.store.body(r.Context(), owner, id, s.now()); errors.Is(err, ErrNotFound) {
				notFound(id).Write(w)
			} else if err != nil {
				s.internal(w, "get", err)
			} else {
				apierror.InvalidParam("stream", "Response '%s' is not a streamed background response (or its events are no longer kept): it cannot be streamed again.", id).Write(w)
			}
		}
		return true
	}
	if !found || terminalStatus(run.Status) {
		return false // ended: stored
	}
	o, err := s.bg.open(run)
	if err != nil {
		s.internal(w, "get", err)
		return true
	}
	writeJSON(w, http.StatusOK, o.snapshot)
	return true
}

// maxGetBody bounds the JSON body a GET may carry.
const maxGetBody = 64 << 10

// streamParams reads stream and starting_after (-1: from the start).
func streamParams(w http.ResponseWriter, r *http.Request) (stream bool, after int64, aerr *apierror.Error) {
	after = -1
	q := r.URL.Query()
	streamV, afterV := q.Get("stream"), q.Get("starting_after")
	if r.Body != nil && r.ContentLength != 0 {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxGetBody))
		if err != nil {
			return false, 0, apierror.TooLarge(maxGetBody)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			root := gjson.ParseBytes(b)
			if !gjson.ValidBytes(b) || !root.IsObject() {
				return false, 0, apierror.InvalidJSON()
			}
			if v := root.Get("stream"); v.Exists() && streamV == "" {
				streamV = v.Raw
			}
			if v := root.Get("starting_after"); v.Exists() && afterV == "" {
				afterV = v.Raw
			}
		}
	}
	if streamV != "" {
		var err error
		if stream, err = strconv.ParseBool(streamV); err != nil {
			return false, 0, apierror.InvalidParam("stream", "Invalid 'stream': expected a boolean, but got '%s'.", streamV)
		}
	}
	if afterV != "" {
		n, err := strconv.ParseInt(afterV, 10, 64)
		if err != nil || n < -1 {
			return false, 0, apierror.InvalidParam("starting_after", "Invalid 'starting_after': expected a sequence number (an integer >= 0), but got '%s'.", afterV)
		}
		after = n
	}
	return stream, after, nil
}

// cancel answers POST /v1/responses/{id}/cancel: a queued or in-progress
// background response is cancelled at once, wherever it runs; cancelling
// an ended one answers it as it is (cancelling is idempotent); any other
// response cannot be cancelled.
func (s *Service) cancel(w http.ResponseWriter, r *http.Request, owner, id string) {
	ctx := r.Context()
	var run BackgroundRun
	err := ErrNotFound
	if s.bg != nil {
		run, err = s.bg.store.Get(ctx, owner, id)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		s.internal(w, "cancel", err)
		return
	}
	if err == nil && !terminalStatus(run.Status) {
		b := s.bg
		o, err := b.open(run)
		if err != nil {
			s.internal(w, "cancel", err)
			return
		}
		var obj responseObject
		if err := json.Unmarshal(o.snapshot, &obj); err != nil {
			s.internal(w, "cancel", err)
			return
		}
		obj.Status = "cancelled"
		snap := obj.marshal()
		// Stored first, as a runner stores its end: whichever stores the
		// id first has ended the run.
		if b.storeResponse(ctx, run, snap, o.input) {
			if _, err := b.store.Cancel(ctx, owner, id, o.dk.Seal(bgFieldSnapshot, snap)); err != nil && !errors.Is(err, ErrNotFound) {
				// The runner sees the stored Response when it tries to
				// store its own, and stops; a taker ends the run from it.
				s.log.Warn("responses: marking a background run cancelled failed", "response", id, "err", err)
			}
			b.interrupt(id)
			b.broadcast()
			s.log.Info("responses: background response cancelled", "response", id)
			writeJSON(w, http.StatusOK, snap)
			return
		}
	}
	// Ended (or never a run, or swept): the stored Response says.
	body, err := s.store.body(ctx, owner, id, s.now())
	switch {
	case errors.Is(err, ErrNotFound):
		notFound(id).Write(w)
	case err != nil:
		s.internal(w, "cancel", err)
	case gjson.GetBytes(body, "background").Bool():
		writeJSON(w, http.StatusOK, body)
	default:
		apierror.InvalidParam("response_id", "Only responses created with background=true can be cancelled, and response '%s' was not.", id).Write(w)
	}
}

// deleteBackground deletes owner's background run id, stopping it if it
// runs here (elsewhere it stops at its next lease renewal); found reports
// whether there was one.
func (s *Service) deleteBackground(ctx context.Context, owner, id string) (found bool, err error) {
	if s.bg == nil {
		return false, nil
	}
	err = s.bg.store.Delete(ctx, owner, id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.bg.interrupt(id)
	s.bg.broadcast()
	return true, nil
}
