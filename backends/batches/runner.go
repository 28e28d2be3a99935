package batches

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
)

// maxRetryAfter caps how long a retry-after header can hold a line back.
const maxRetryAfter = 60 * time.Second

// job is a batch being driven by this process's runner.
type job struct {
	id string
	// cancel is closed when the batch is cancelled through the API.
	cancel     chan struct{}
	cancelOnce sync.Once
}

// Run executes batches until ctx ends: it claims every runnable batch
// (validating, in progress, finalizing or cancelling) that no replica
// holds a live lease on, every ClaimInterval and at once when one is
// created here, and runs each (in progress ones resume where their
// recorded results end). When ctx ends it stops starting lines, abandons
// those in flight (they are sent again by whichever runner claims the
// batch next, as their results were not recorded), saves progress,
// releases its leases and returns. Only one Run may be active at a time.
func (s *Service) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.runCtx != nil {
		s.mu.Unlock()
		return errors.New("batches: Run is already active")
	}
	s.runCtx = ctx
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.runCtx = nil
		s.mu.Unlock()
		s.wg.Wait()
	}()

	s.sweepSpools(ctx)
	if s.stableReplica {
		// Leases this replica id holds are a previous process's: take
		// them back now rather than wait for them to expire.
		if err := s.store.Release(ctx, "", s.replicaID); err != nil {
			return fmt.Errorf("batches: run: %w", err)
		}
	}
	t := time.NewTicker(s.opts.ClaimInterval)
	defer t.Stop()
	for {
		s.claimAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.wake:
		}
	}
}

// claimAll claims runnable batches without a live lease (new ones, and
// those of replicas that stopped renewing) until there are none, and starts
// each.
func (s *Service) claimAll(ctx context.Context) {
	for ctx.Err() == nil {
		id, err := s.store.Claim(ctx, s.replicaID, s.opts.Lease)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("batches: claiming batches failed", "err", err)
			}
			return
		}
		if id == "" {
			return
		}
		s.start(id)
	}
}

// poke makes Run claim at once (a batch was created here).
func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// start drives batch id in the background if Run is active and it is not
// already running.
func (s *Service) start(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := s.runCtx
	if ctx == nil || ctx.Err() != nil {
		return
	}
	if _, ok := s.jobs[id]; ok {
		return
	}
	j := &job{id: id, cancel: make(chan struct{})}
	s.jobs[id] = j
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		jctx, jcancel := context.WithCancel(ctx)
		held := make(chan struct{})
		go func() {
			defer close(held)
			s.holdLease(jctx, jcancel, j)
		}()
		s.runJob(jctx, j)
		jcancel()
		<-held
		s.mu.Lock()
		delete(s.jobs, id)
		s.mu.Unlock()
		if s.local != nil {
			s.local.forget(id)
		}
		// Let another replica (or this one) take the batch at once if it
		// is not finished; a terminal batch has no lease left.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.store.Release(rctx, id, s.replicaID); err != nil {
			s.log.Warn("batches: releasing a lease failed", "batch", id, "err", err)
		}
	}()
}

// holdLease renews this replica's lease on j's batch every Lease/3 while
// it runs, and cancels the job (abandoning its lines in flight) when the
// lease is lost or could not be renewed for a whole Lease: by then
// another replica may have taken the batch over. It also relays a cancel
// made through another replica's API.
func (s *Service) holdLease(ctx context.Context, stop context.CancelFunc, j *job) {
	every := max(s.opts.Lease/3, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := s.store.Renew(ctx, j.id, s.replicaID, s.opts.Lease)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("batches: renewing a lease failed", "batch", j.id, "err", err)
			if time.Since(renewed) >= s.opts.Lease {
				stop()
				return
			}
			continue
		case !ok:
			s.log.Warn("batches: lost the lease on a running batch; stopping it here", "batch", j.id)
			stop()
			return
		}
		renewed = time.Now()
		if b, err := s.store.Load(ctx, j.id); err == nil && b.Status == StatusCancelling {
			s.signalCancel(j.id)
		}
	}
}

// signalCancel tells batch id's job, if it runs here, that it was cancelled.
func (s *Service) signalCancel(id string) {
	s.mu.Lock()
	j := s.jobs[id]
	s.mu.Unlock()
	if j != nil {
		j.cancelOnce.Do(func() { close(j.cancel) })
	}
}

// runJob drives one batch to a terminal state. An internal failure (the
// database, the disk) is retried after RestartDelay: the batch's state is
// in the database and its spool files, so starting over is safe.
func (s *Service) runJob(ctx context.Context, j *job) {
	for {
		err := s.advance(ctx, j)
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.Error("batches: processing a batch failed; retrying", "batch", j.id, "err", err, "in", s.opts.RestartDelay)
		if s.local != nil {
			// Reopened for the retry: that cuts off a line a failed write
			// left partial.
			s.local.forget(j.id)
		}
		t := time.NewTimer(s.opts.RestartDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// advance moves the batch through its states until it is terminal or ctx
// ends. Each step ends with a compare-and-set of the status, and the loop
// acts on whatever the status then is: a cancel that lands between steps is
// simply the next state.
func (s *Service) advance(ctx context.Context, j *job) error {
	for ctx.Err() == nil {
		b, err := s.store.Load(ctx, j.id)
		if err != nil {
			return err
		}
		switch b.Status {
		case StatusValidating:
			err = s.validateBatch(ctx, j, b)
		case StatusInProgress:
			err = s.runLines(ctx, j, b)
		case StatusFinalizing:
			err = s.finish(ctx, b, StatusFinalizing, StatusCompleted, nil)
		case StatusCancelling:
			err = s.finish(ctx, b, StatusCancelling, StatusCancelled, nil)
		default:
			s.dropResults(ctx, b.ID)
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) expired(b Batch) bool { return s.opts.Now().Unix() >= b.ExpiresAt }

// inputGone fails a batch whose input file was deleted before the batch
// could read it all, keeping whatever results it has.
func (s *Service) inputGone(ctx context.Context, b Batch) error {
	param := "input_file_id"
	s.log.Warn("batches: input file deleted while the batch ran", "batch", b.ID, "file", b.InputFileID)
	return s.finish(ctx, b, b.Status, StatusFailed, []BatchError{{Code: "input_file_deleted", Param: &param,
		Message: fmt.Sprintf("The input file %s was deleted before the batch finished.", b.InputFileID)}})
}

// validateBatch reads the input file once and moves the batch to
// in_progress, or to failed with what is wrong with it.
func (s *Service) validateBatch(ctx context.Context, j *job, b Batch) error {
	if s.expired(b) {
		_, err := s.store.Transition(ctx, b.ID, []string{StatusValidating}, StatusExpired, s.opts.Now(), Change{})
		return err
	}
	in, err := s.openInput(ctx, b)
	if errors.Is(err, files.ErrNotFound) {
		return s.inputGone(ctx, b)
	}
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	v, err := validate(ctx, in, b.Endpoint, s.opts.MaxLines, s.opts.MaxLineBytes, j.cancel)
	in.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("validate: %w", err)
	}
	select {
	case <-j.cancel:
		return nil // the status is cancelling: advance goes on from there
	default:
	}
	now := s.opts.Now()
	if v.nerrs > 0 {
		s.log.Info("batch failed validation", "batch", b.ID, "errors", v.nerrs)
		_, err = s.store.Transition(ctx, b.ID, []string{StatusValidating}, StatusFailed, now, Change{Errors: v.errs})
		return err
	}
	s.log.Info("batch validated", "batch", b.ID, "lines", v.total)
	_, err = s.store.Transition(ctx, b.ID, []string{StatusValidating}, StatusInProgress, now,
		Change{Total: &v.total, Model: &v.model})
	return err
}

// finish turns the spool files into batch_output files and moves the batch
// from `from` to `to`. It can be repeated after a crash: a file already
// made is recorded on the batch at once and not made again. (A crash
// between making a file and recording it leaves one orphaned file, which
// expires with the others.)
func (s *Service) finish(ctx context.Context, b Batch, from, to string, errs []BatchError) error {
	c := b.Counts
	st, err := recordedState(ctx, s.results, b.ID, false)
	if err != nil {
		return err
	}
	if st.counts.Completed+st.counts.Failed > 0 {
		c.Completed, c.Failed = st.counts.Completed, st.counts.Failed
		c.InputTokens, c.CachedTokens = st.counts.InputTokens, st.counts.CachedTokens
		c.OutputTokens, c.ReasoningTokens, c.TotalTokens = st.counts.OutputTokens, st.counts.ReasoningTokens, st.counts.TotalTokens
		err = s.makeFile(ctx, b, ResultOutput, "output", b.OutputFileID)
		if err == nil {
			err = s.makeFile(ctx, b, ResultError, "error", b.ErrorFileID)
		}
		if err != nil {
			return err
		}
	}
	ok, err := s.store.Transition(ctx, b.ID, []string{from}, to, s.opts.Now(), Change{Counts: &c, Errors: errs})
	if err != nil {
		return err
	}
	if ok {
		s.log.Info("batch "+to, "batch", b.ID, "completed", c.Completed, "failed", c.Failed)
		s.dropResults(ctx, b.ID)
	}
	return nil
}

// makeFile stores one spool file as a batch_output file, unless it is empty
// (OpenAI sets output_file_id only when there were successes, and
// error_file_id only when there were failures) or already stored.
func (s *Service) makeFile(ctx context.Context, b Batch, rk ResultKind, kind, have string) error {
	if have != "" {
		return nil
	}
	f, size, err := s.results.Stream(ctx, b.ID, rk)
	if err != nil {
		return err
	}
	defer f.Close()
	if size == 0 {
		return nil
	}
	retention := outputRetention
	if b.OutputExpiresAfter > 0 {
		retention = time.Duration(b.OutputExpiresAfter) * time.Second
	}
	now := s.opts.Now()
	made, err := s.files.Create(ctx, b.Owner, files.File{
		Filename:  fmt.Sprintf("%s_%s.jsonl", b.ID, kind),
		Purpose:   "batch_output",
		CreatedAt: now,
		ExpiresAt: now.Add(retention),
	}, f, size)
	if err != nil {
		return fmt.Errorf("store %s file: %w", kind, err)
	}
	ch := Change{OutputFileID: &made.ID}
	if kind == "error" {
		ch = Change{ErrorFileID: &made.ID}
	}
	return s.store.Update(ctx, b.ID, ch)
}

// maxSpoolLine bounds a spool line: a custom_id (from an input line) and a
// response body, plus the envelope.
func (s *Service) maxSpoolLine() int {
	return s.opts.MaxLineBytes + int(s.opts.MaxResponseBytes) + 64<<10
}

// Why a run stopped starting lines.
const (
	haltNone = iota
	haltCancelled
	haltExpired
	haltBroken // a spool write failed
)

// run is one pass of an in-progress batch over its input.
type run struct {
	s *Service
	b Batch
	// counts (guarded by mu): results already recorded when the run
	// started plus those recorded since.
	mu      sync.Mutex
	c       Counts
	changed bool
	// slots bounds this batch's lines in flight (Options.Concurrency).
	slots chan struct{}
	wg    sync.WaitGroup
	// halt is closed when no new line may start; why says why.
	halt     chan struct{}
	haltOnce sync.Once
	why      int
	writeErr error
	// pace holds lines back while the owner's tokens per minute are spent.
	pace *pacer
}

func (r *run) stop(why int) {
	r.haltOnce.Do(func() {
		r.why = why
		close(r.halt)
	})
}

// runLines sends the batch's lines that have no result yet. It returns when
// every line has a result (the batch moves to finalizing), the batch was
// cancelled (in-flight lines finish first), it expired (lines not started
// get batch_expired results, then the batch is finished as expired), or
// ctx ended (in-flight lines are abandoned; the next Run resumes).
func (s *Service) runLines(ctx context.Context, j *job, b Batch) error {
	if s.expired(b) {
		return s.expire(ctx, b)
	}
	st, err := recordedState(ctx, s.results, b.ID, true)
	if err != nil {
		return err
	}
	in, err := s.openInput(ctx, b)
	if errors.Is(err, files.ErrNotFound) {
		return s.inputGone(ctx, b)
	}
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	defer in.Close()
	if len(st.done) > 0 {
		s.log.Info("batch resuming", "batch", b.ID, "done", len(st.done), "total", b.Counts.Total)
	}

	r := &run{s: s, b: b, c: st.counts, slots: make(chan struct{}, s.opts.Concurrency), halt: make(chan struct{})}
	r.pace = &pacer{after: s.opts.After, halt: r.halt}
	r.c.Total = b.Counts.Total
	tickDone := make(chan struct{})
	tickStopped := make(chan struct{})
	go r.tick(ctx, j, tickDone, tickStopped)

	lr := newLineReader(in, s.opts.MaxLineBytes)
	var readErr error
	index := int64(-1)
	for ctx.Err() == nil {
		line, tooLong, _, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			readErr = fmt.Errorf("read input: %w", err)
			break
		}
		if tooLong || blank(line) {
			continue // validation saw to it that there are none of the former
		}
		index++
		cid := gjson.GetBytes(line, "custom_id")
		if _, ok := st.done[keyOf(cid.Str)]; ok {
			continue
		}
		if s.expired(b) {
			r.stop(haltExpired)
		}
		body := gjson.GetBytes(line, "body").Raw
		// While the owner's tokens are spent, no line starts.
		if !r.pace.wait(ctx) {
			break
		}
		// The line in flight holds its custom_id as well as its body (the
		// custom_id is not bounded but by the line's length).
		units, ok := r.acquire(ctx, len(body)+len(cid.Raw))
		if !ok {
			break
		}
		// GetBytes returns copies: line is the reader's buffer, reused for
		// the next line, and these outlive it.
		l := pending{customID: cid.Raw, cid: cid.Str, index: index, body: body, units: units}
		r.wg.Add(1)
		go r.send(ctx, l)
	}
	r.wg.Wait()
	close(tickDone)
	<-tickStopped
	r.saveProgress(context.WithoutCancel(ctx))

	switch {
	case ctx.Err() != nil:
		return nil
	case readErr != nil:
		return readErr
	case r.why == haltBroken:
		return r.writeErr
	case r.why == haltCancelled:
		return nil // the status is cancelling; advance finishes it
	case r.why == haltExpired && !r.allDone():
		return s.expire(ctx, b)
	}
	// Every line has a result (the window may have ended while the last ones
	// were in flight): the batch completes.
	_, err = s.store.Transition(ctx, b.ID, []string{StatusInProgress}, StatusFinalizing, s.opts.Now(), Change{Counts: new(r.snapshot())})
	return err
}

// expire finishes an in-progress batch whose completion window has passed:
// the lines that never started get batch_expired results, and the partial
// files are kept.
func (s *Service) expire(ctx context.Context, b Batch) error {
	if err := s.writeExpired(ctx, b); err != nil {
		return err
	}
	return s.finish(ctx, b, StatusInProgress, StatusExpired, nil)
}

// writeExpired gives every line of the input without a result in the spool a
// batch_expired error result. It is a no-op when every line has one.
func (s *Service) writeExpired(ctx context.Context, b Batch) error {
	st, err := recordedState(ctx, s.results, b.ID, true)
	if err != nil {
		return err
	}
	if int64(len(st.done)) >= b.Counts.Total {
		return nil
	}
	in, err := s.openInput(ctx, b)
	if errors.Is(err, files.ErrNotFound) {
		return nil // nothing to name the missing lines by; finish with what there is
	}
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	defer in.Close()
	lr := newLineReader(in, s.opts.MaxLineBytes)
	index := int64(-1)
	for {
		line, tooLong, _, err := lr.next()
		if errors.Is(err, io.EOF) {
			return s.results.Sync(ctx, b.ID)
		}
		if err != nil {
			return fmt.Errorf("read input: %w", err)
		}
		if tooLong || blank(line) {
			continue
		}
		index++
		cid := gjson.GetBytes(line, "custom_id")
		if _, ok := st.done[keyOf(cid.Str)]; ok {
			continue
		}
		if err := s.results.Record(ctx, b.ID, Result{Index: index, CustomID: cid.Str, Kind: ResultError,
			Line: errorLine(cid.Raw, "batch_expired",
				"This request could not be executed before the batch's completion window expired.")}); err != nil {
			return err
		}
	}
}

// pending is a line on its way to the gateway.
type pending struct {
	customID string // the raw JSON string token of the input line
	cid      string // the custom_id decoded
	index    int64  // among the input's request lines
	body     string // the raw JSON of the line's body, sent as is
	units    int    // of the byte budget
}

// acquire waits for a slot of this batch, a global slot and room in the
// byte budget for a body of n bytes. It fails when the run halts or ctx
// ends.
func (r *run) acquire(ctx context.Context, n int) (int, bool) {
	// Checked first and last: a select with a free slot and a closed halt
	// picks either at random, and a halted run must not start lines.
	if r.halted() || ctx.Err() != nil {
		return 0, false
	}
	select {
	case r.slots <- struct{}{}:
	case <-r.halt:
		return 0, false
	case <-ctx.Done():
		return 0, false
	}
	select {
	case r.s.global <- struct{}{}:
	case <-r.halt:
		<-r.slots
		return 0, false
	case <-ctx.Done():
		<-r.slots
		return 0, false
	}
	units, ok := r.s.bytes.acquire(ctx, r.halt, n)
	if !ok {
		<-r.s.global
		<-r.slots
		return 0, false
	}
	if r.halted() {
		r.release(pending{units: units})
		return 0, false
	}
	return units, true
}

func (r *run) halted() bool {
	select {
	case <-r.halt:
		return true
	default:
		return false
	}
}

func (r *run) release(l pending) {
	r.s.bytes.release(l.units)
	<-r.s.global
	<-r.slots
}

// tick saves progress every ProgressInterval, and halts the run when the
// batch expires or is cancelled.
func (r *run) tick(ctx context.Context, j *job, done <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(r.s.opts.ProgressInterval)
	defer t.Stop()
	cancel := j.cancel
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-cancel:
			r.stop(haltCancelled)
			cancel = nil // closed: stop selecting it
		case <-t.C:
			if r.s.expired(r.b) {
				r.stop(haltExpired)
			}
			r.saveProgress(ctx)
		}
	}
}

// allDone reports whether every line of the batch has a result.
func (r *run) allDone() bool {
	c := r.snapshot()
	return c.Completed+c.Failed >= c.Total
}

func (r *run) snapshot() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

// saveProgress writes the counts to the database if they changed, after
// syncing the spool files so the database never counts a result the files
// could lose.
func (r *run) saveProgress(ctx context.Context) {
	r.mu.Lock()
	changed, c := r.changed, r.c
	r.changed = false
	r.mu.Unlock()
	if !changed {
		return
	}
	if err := r.s.results.Sync(ctx, r.b.ID); err != nil {
		r.s.log.Warn("batches: syncing results failed", "batch", r.b.ID, "err", err)
	}
	if err := r.s.store.Update(ctx, r.b.ID, Change{Counts: &c}); err != nil && ctx.Err() == nil {
		r.s.log.Warn("batches: saving progress failed", "batch", r.b.ID, "err", err)
	}
}

// record records line l's result and counts it (usage: the response body's
// usage, for a success).
func (r *run) record(ctx context.Context, l pending, kind ResultKind, line []byte, usage *gjson.Result) error {
	if err := r.s.results.Record(ctx, r.b.ID, Result{Index: l.index, CustomID: l.cid, Kind: kind, Line: line}); err != nil {
		r.mu.Lock()
		if r.writeErr == nil {
			r.writeErr = err
		}
		r.mu.Unlock()
		r.stop(haltBroken)
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = true
	if kind == ResultOutput {
		r.c.Completed++
		if usage != nil {
			r.c.addUsage(*usage)
		}
	} else {
		r.c.Failed++
	}
	return nil
}

// send executes one line through the gateway and records its result. Lines
// the gateway could not answer, or answered 429 or 5xx, are retried with
// backoff; if the run halts meanwhile, the last outcome is recorded at
// once. If ctx ends, nothing is recorded: the line was not done, and the
// next Run sends it.
func (r *run) send(ctx context.Context, l pending) {
	defer r.wg.Done()
	holdsGlobal := true
	defer func() {
		r.s.bytes.release(l.units)
		if holdsGlobal {
			<-r.s.global
		}
		<-r.slots
	}()
	opts := &r.s.opts
	for attempt := 0; ; {
		gen := r.pace.generation()
		a, err := r.attempt(ctx, l)
		if ctx.Err() != nil {
			r.s.freeAnswer(&a)
			return
		}
		if err == nil && a.paced {
			// The owner's tokens per minute are spent until retry-after:
			// the run pauses and the line is sent again then, without
			// counting an attempt. Meanwhile it gives back its global
			// slot, so paced batches do not hold up other owners'. If the
			// run halts first, the line has no result, as one never
			// started (an expiry gives it batch_expired).
			d := a.retryAfter
			if d <= 0 {
				d = opts.RetryBackoff
			}
			r.s.freeAnswer(&a)
			r.pace.pause(d, gen)
			<-r.s.global
			holdsGlobal = false
			if !r.pace.wait(ctx) || !r.regainGlobal(ctx) {
				return
			}
			holdsGlobal = true
			continue
		}
		// An answer too large to record is the same answer next time, and
		// each attempt is a model call the owner pays for: not retried.
		retry := !errors.Is(err, errResponseTooLarge) &&
			(err != nil || a.status == http.StatusTooManyRequests || a.status >= 500)
		if retry && attempt < opts.MaxRetries {
			// The answer is kept (and counted) through the backoff: if the
			// run halts meanwhile, it is the outcome recorded.
			if r.backoff(ctx, attempt, a.retryAfter) {
				r.s.freeAnswer(&a)
				attempt++
				continue
			}
		}
		if ctx.Err() != nil {
			r.s.freeAnswer(&a)
			return
		}
		switch {
		case errors.Is(err, errResponseTooLarge):
			_ = r.record(ctx, l, ResultError, errorLine(l.customID, "response_too_large",
				fmt.Sprintf("The response was larger than %d bytes.", opts.MaxResponseBytes)), nil)
		case err != nil:
			r.s.log.Warn("batches: a line got no answer from the gateway", "batch", r.b.ID, "attempts", attempt+1, "err", err)
			_ = r.record(ctx, l, ResultError, errorLine(l.customID, "request_failed",
				fmt.Sprintf("The request could not be completed: the gateway did not answer after %d attempts.", attempt+1)), nil)
		default:
			r.recordResponse(ctx, l, &a)
		}
		r.s.freeAnswer(&a)
		return
	}
}

// regainGlobal takes a global slot back after a pause; false if the run
// halted or ctx ended first.
func (r *run) regainGlobal(ctx context.Context) bool {
	select {
	case r.s.global <- struct{}{}:
		return true
	case <-r.halt:
		return false
	case <-ctx.Done():
		return false
	}
}

var errResponseTooLarge = errors.New("response too large")

// Answers in memory. An answer of at most smallAnswer bytes is read into a
// pooled buffer and its output line built in another: the concurrency
// limits bound these (GlobalConcurrency × 2 × smallAnswer, 32 MiB by
// default) and the common path allocates no buffer per line. A larger
// answer first reserves room in the answers budget (MaxInFlightBytes) for
// itself and for its output line (the answer's Content-Length, or
// MaxResponseBytes when the length is not announced), and gives back what
// it did not use once read. Reserving all at once, and never waiting for
// the budget while holding part of it, means two answers cannot each wait
// for room the other holds.
const (
	smallAnswer = 64 << 10
	// lineOverhead is the room an output line needs besides its custom_id
	// and body: the envelope, ids and status.
	lineOverhead = 512
)

// bufPool holds smallAnswer-sized buffers: answers being read and output
// lines being built.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, smallAnswer)
	return &b
}}

// answer is a gateway answer read whole.
type answer struct {
	status     int
	reqID      string
	retryAfter time.Duration
	// paced: the gateway's 429 for a line that waits for its owner's
	// tokens per minute (caller.PacedHeader).
	paced  bool
	body   []byte
	pooled *[]byte // body's buffer, from bufPool
	units  int     // of the answers budget
}

// freeAnswer gives back a's buffer and budget.
func (s *Service) freeAnswer(a *answer) {
	if a.pooled != nil {
		*a.pooled = a.body[:0]
		bufPool.Put(a.pooled)
	}
	s.answers.release(a.units)
	*a = answer{}
}

// attempt sends the line once and reads the whole answer.
func (r *run) attempt(ctx context.Context, l pending) (a answer, err error) {
	actx, cancel := context.WithTimeout(ctx, r.s.opts.RequestTimeout)
	defer cancel()
	resp, err := r.s.gw.Do(actx, r.b.Owner, caller.OriginBatch, http.MethodPost, r.b.Endpoint, strings.NewReader(l.body))
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	limit := r.s.opts.MaxResponseBytes
	if resp.ContentLength > limit {
		return a, errResponseTooLarge
	}
	eof := false
	if resp.ContentLength <= smallAnswer { // including -1, not announced
		bp := bufPool.Get().(*[]byte)
		a.body, a.pooled = (*bp)[:0], bp
		a.body, eof, err = readAnswer(resp.Body, a.body, smallAnswer)
	}
	if err == nil && !eof {
		err = r.readLarge(actx, resp, l, &a)
	}
	if err == nil && int64(len(a.body)) > limit {
		err = errResponseTooLarge
	}
	if err != nil {
		status := a.status
		r.s.freeAnswer(&a)
		if !errors.Is(err, errResponseTooLarge) {
			err = fmt.Errorf("read answer: %w", err)
		}
		a.status = status
		return a, err
	}
	if s, err := strconv.Atoi(resp.Header.Get("retry-after")); err == nil && s > 0 {
		a.retryAfter = min(time.Duration(s)*time.Second, maxRetryAfter)
	}
	a.reqID = resp.Header.Get("x-request-id")
	a.paced = a.status == http.StatusTooManyRequests && resp.Header.Get(caller.PacedHeader) != ""
	return a, nil
}

// readLarge reads the rest of an answer longer than smallAnswer (a.body
// holds what was read so far), after reserving room for it and its output
// line in the answers budget.
func (r *run) readLarge(ctx context.Context, resp *http.Response, l pending, a *answer) error {
	limit := r.s.opts.MaxResponseBytes
	size := limit + 1 // one byte over the limit tells a too-large answer
	if resp.ContentLength >= 0 {
		size = resp.ContentLength + 1 // and one more byte to see the end
	}
	units, ok := r.s.answers.acquire(ctx, nil, int(2*size)+len(l.customID)+lineOverhead)
	if !ok {
		return fmt.Errorf("waiting for memory for a large answer: %w", context.Cause(ctx))
	}
	a.units = units
	size0 := size // known length: read into a buffer of that size
	if resp.ContentLength < 0 {
		size0 = min(size, int64(max(2*smallAnswer, len(a.body)))) // grown by doubling
	}
	body := make([]byte, len(a.body), size0)
	copy(body, a.body)
	if a.pooled != nil {
		*a.pooled = a.body[:0]
		bufPool.Put(a.pooled)
		a.pooled = nil
	}
	body, _, err := readAnswer(resp.Body, body, int(limit)+1)
	a.body = body
	if err != nil {
		return err
	}
	// Done with the connection before part of the reservation goes back:
	// the next large answer then never overlaps this one's read (the
	// deferred Close in attempt is then a no-op).
	_ = resp.Body.Close()
	// Keep room for what was read and its output line only.
	keep := r.s.answers.unitsFor(cap(body) + len(body) + len(l.customID) + lineOverhead)
	if keep < a.units {
		r.s.answers.release(a.units - keep)
		a.units = keep
	}
	return nil
}

// readAnswer appends rd's bytes to buf until EOF (eof true) or until buf
// holds limit bytes, growing buf by doubling up to limit.
func readAnswer(rd io.Reader, buf []byte, limit int) ([]byte, bool, error) {
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(max(cap(buf), 512), limit-len(buf)))
		}
		n, err := rd.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
	return buf, false, nil
}

// backoff waits before retry attempt+1: RetryBackoff doubled per attempt,
// or retryAfter if longer. It reports false if the run halted (record the
// outcome now) or ctx ended.
func (r *run) backoff(ctx context.Context, attempt int, retryAfter time.Duration) bool {
	d := max(r.s.opts.RetryBackoff<<attempt, retryAfter)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.halt:
		return false
	case <-ctx.Done():
		return false
	}
}

// notJSONObject replaces an answer that is not a JSON object.
const notJSONObject = `{"error":{"message":"The gateway answered with a body that is not a JSON object.","type":"server_error","param":null,"code":"invalid_response"}}`

// recordResponse records the gateway's answer: a 2xx in the output file, any
// other status in the error file, with the body as the gateway sent it
// (compacted onto one line). A body that is not a JSON object (a proxy's
// HTML error page, say) is replaced by an error object saying so. The line
// is built in one buffer, the body compacted straight into it: a pooled
// buffer for a small answer, one sized to the answer (and counted with it
// in the answers budget) for a large one.
func (r *run) recordResponse(ctx context.Context, l pending, a *answer) {
	status, reqID := a.status, a.reqID
	if reqID == "" {
		reqID = newID("req_")
	}
	need := len(a.body) + len(l.customID) + len(reqID) + lineOverhead
	var line *bytes.Buffer
	if need <= smallAnswer {
		bp := bufPool.Get().(*[]byte)
		line = bytes.NewBuffer((*bp)[:0])
		defer func() {
			*bp = line.Bytes()[:0]
			bufPool.Put(bp)
		}()
	} else {
		line = bytes.NewBuffer(make([]byte, 0, need))
	}
	head := func(status int) int {
		line.WriteString(`{"id":"`)
		line.WriteString(newID("batch_req_"))
		line.WriteString(`","custom_id":`)
		line.WriteString(l.customID)
		line.WriteString(`,"response":{"status_code":`)
		line.Write(strconv.AppendInt(line.AvailableBuffer(), int64(status), 10))
		line.WriteString(`,"request_id":`)
		line.Write(appendJSONString(line.AvailableBuffer(), reqID))
		line.WriteString(`,"body":`)
		return line.Len()
	}
	bodyAt := head(status)
	// Compact writes nothing unless the whole body is valid JSON.
	if err := json.Compact(line, a.body); err != nil || line.Len() == bodyAt || line.Bytes()[bodyAt] != '{' {
		if status/100 == 2 {
			status = http.StatusBadGateway
		}
		line.Reset()
		bodyAt = head(status)
		line.WriteString(notJSONObject)
	}
	bodyEnd := line.Len()
	line.WriteString("},\"error\":null}\n")
	if status/100 == 2 {
		u := gjson.GetBytes(line.Bytes()[bodyAt:bodyEnd], "usage")
		_ = r.record(ctx, l, ResultOutput, line.Bytes(), &u)
		return
	}
	_ = r.record(ctx, l, ResultError, line.Bytes(), nil)
}

// errorLine is the result of a line that got no answer: response null and an
// error object.
func errorLine(customIDRaw, code, message string) []byte {
	line := make([]byte, 0, len(customIDRaw)+len(message)+128)
	line = append(line, `{"id":"`...)
	line = append(line, newID("batch_req_")...)
	line = append(line, `","custom_id":`...)
	line = append(line, customIDRaw...)
	line = append(line, `,"response":null,"error":{"code":`...)
	line = appendJSONString(line, code)
	line = append(line, `,"message":`...)
	line = appendJSONString(line, message)
	line = append(line, "}}\n"...)
	return line
}

func appendJSONString(dst []byte, s string) []byte {
	if !needsEscape(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// needsEscape reports whether s is not plain printable ASCII that JSON (and
// json.Marshal, which also escapes <, > and &) writes as is.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return true
		}
	}
	return false
}

// byteBudget bounds the bytes of request bodies in flight, in units of
// budgetUnit. One acquirer takes units at a time (lock), so two large lines
// can never each hold part of what the other waits for.
type byteBudget struct {
	lock   chan struct{}
	tokens chan struct{}
}

const budgetUnit = 64 << 10

// unitsFor is how many units n bytes take (a line larger than the whole
// budget takes all of it).
func (b *byteBudget) unitsFor(n int) int {
	return min(max((n+budgetUnit-1)/budgetUnit, 1), cap(b.tokens))
}

func newByteBudget(limit int64) *byteBudget {
	n := max(limit/budgetUnit, 1)
	return &byteBudget{lock: make(chan struct{}, 1), tokens: make(chan struct{}, n)}
}

// acquire takes room for n bytes (a line larger than the whole budget takes
// all of it); it fails if halt closes or ctx ends first.
func (b *byteBudget) acquire(ctx context.Context, halt <-chan struct{}, n int) (int, bool) {
	units := b.unitsFor(n)
	select {
	case b.lock <- struct{}{}:
	case <-halt:
		return 0, false
	case <-ctx.Done():
		return 0, false
	}
	defer func() { <-b.lock }()
	for i := range units {
		select {
		case b.tokens <- struct{}{}:
		case <-halt:
			b.release(i)
			return 0, false
		case <-ctx.Done():
			b.release(i)
			return 0, false
		}
	}
	return units, true
}

func (b *byteBudget) release(units int) {
	for range units {
		<-b.tokens
	}
}
