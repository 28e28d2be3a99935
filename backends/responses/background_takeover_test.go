package responses

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// errDead is what a killed replica's store answers.
var errDead = errors.New("replica killed")

// killable is a BackgroundStore that fails every call once killed: to
// the database, the replica is gone (it renews no lease, records nothing,
// releases nothing), as after SIGKILL, while its goroutines still run.
type killable struct {
	BackgroundStore
	dead atomic.Bool
}

func (k *killable) Create(ctx context.Context, r BackgroundRun, n int) error {
	if k.dead.Load() {
		return errDead
	}
	return k.BackgroundStore.Create(ctx, r, n)
}

func (k *killable) Get(ctx context.Context, owner, id string) (BackgroundRun, error) {
	if k.dead.Load() {
		return BackgroundRun{}, errDead
	}
	return k.BackgroundStore.Get(ctx, owner, id)
}

func (k *killable) Claim(ctx context.Context, replica string, lease time.Duration) (BackgroundRun, bool, error) {
	if k.dead.Load() {
		return BackgroundRun{}, false, errDead
	}
	return k.BackgroundStore.Claim(ctx, replica, lease)
}

func (k *killable) Renew(ctx context.Context, id, replica string, lease time.Duration) (bool, error) {
	if k.dead.Load() {
		return false, errDead
	}
	return k.BackgroundStore.Renew(ctx, id, replica, lease)
}

func (k *killable) Advance(ctx context.Context, id, replica string, a Advance) (bool, error) {
	if k.dead.Load() {
		return false, errDead
	}
	return k.BackgroundStore.Advance(ctx, id, replica, a)
}

func (k *killable) Cancel(ctx context.Context, owner, id string, snapshot []byte) (bool, error) {
	if k.dead.Load() {
		return false, errDead
	}
	return k.BackgroundStore.Cancel(ctx, owner, id, snapshot)
}

func (k *killable) Events(ctx context.Context, owner, id string, after int64, limit int) ([]Event, error) {
	if k.dead.Load() {
		return nil, errDead
	}
	return k.BackgroundStore.Events(ctx, owner, id, after, limit)
}

func (k *killable) Release(ctx context.Context, id, replica string) error {
	if k.dead.Load() {
		return errDead
	}
	return k.BackgroundStore.Release(ctx, id, replica)
}

func (k *killable) Delete(ctx context.Context, owner, id string) error {
	if k.dead.Load() {
		return errDead
	}
	return k.BackgroundStore.Delete(ctx, owner, id)
}

func (k *killable) Sweep(ctx context.Context, before time.Time) (int64, error) {
	if k.dead.Load() {
		return 0, errDead
	}
	return k.BackgroundStore.Sweep(ctx, before)
}

// TestBackgroundSurvivesItsReplica: a streamed background response whose
// replica stops mid-run (its model call in flight, its client gone) is run
// again from the start by the next claimer: the same process restarted on
// the same data directory, or another replica of a fleet once the dead
// one's lease expired (or at once, after a graceful stop). A client
// resuming on the new replica sees every event after the one it had, with
// no gap and no repeat: the first attempt's, then the second's from its
// response.in_progress, to response.completed; the Response is stored once,
// by the second attempt.
func TestBackgroundSurvivesItsReplica(t *testing.T) {
	type replica struct {
		env  *bgEnv
		kill func()
	}
	sqlite := func(t *testing.T) (first replica, second func(g *gate) *bgEnv) {
		dir := t.TempDir()
		e := newBgEnv(t, newGate(fakeGateway(t), true), Options{DataDir: dir})
		return replica{env: e, kill: e.close}, func(g *gate) *bgEnv { return newBgEnv(t, g, Options{DataDir: dir}) }
	}
	postgres := func(crash bool) func(t *testing.T) (replica, func(g *gate) *bgEnv) {
		return func(t *testing.T) (replica, func(g *gate) *bgEnv) {
			dsn := pgtest.DSN(t)
			kek, _ := envelope.NewKey()
			ring, err := envelope.NewKeyring(kek)
			if err != nil {
				t.Fatal(err)
			}
			open := func(g *gate, wrap func(BackgroundStore) BackgroundStore) *bgEnv {
				rs, err := OpenPostgresStore(t.Context(), dsn, pgdb.Pool{})
				if err != nil {
					t.Fatal(err)
				}
				bs, err := OpenPostgresBackgroundStore(t.Context(), dsn, pgdb.Pool{})
				if err != nil {
					t.Fatal(err)
				}
				return newBgEnv(t, g, Options{Store: rs, Keys: ring,
					Background: BackgroundOptions{Store: wrap(bs), Lease: 600 * time.Millisecond}})
			}
			k := &killable{}
			a := open(newGate(fakeGateway(t), true), func(s BackgroundStore) BackgroundStore { k.BackgroundStore = s; return k })
			kill := a.close
			if crash {
				kill = func() { k.dead.Store(true) }
			}
			return replica{env: a, kill: kill}, func(g *gate) *bgEnv {
				return open(g, func(s BackgroundStore) BackgroundStore { return s })
			}
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (replica, func(g *gate) *bgEnv)
	}{
		{"restart on SQLite", sqlite},
		{"graceful stop, another replica on Postgres", postgres(false)},
		{"crash, another replica on Postgres after the lease", postgres(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second := tc.setup(t)
			a := first.env
			ctx, hangUp := context.WithCancel(t.Context())
			c := a.client("alice")
			s := c.Responses.NewStreaming(ctx, bgParams("survive the replica"))
			got := readStream(t, s, "response.in_progress")
			hangUp()
			s.Close()
			contiguous(t, got.seqs, 0)
			waitFor(t, a.gate.entered, "the first attempt's model call")

			first.kill()
			b := second(newGate(fakeGateway(t), false))
			cb := b.client("alice")
			r := readStream(t, cb.Responses.GetStreaming(t.Context(), got.id, responses.ResponseGetParams{StartingAfter: openai.Int(2)}), "")
			contiguous(t, r.seqs, 3)
			if len(r.types) == 0 || r.types[0] != "response.in_progress" || r.final == nil || r.final.Status != "completed" ||
				r.text.String() != "Echo: survive the replica" || r.final.OutputText() != r.text.String() {
				t.Fatalf("resumed on the new replica: types %v text %q final %+v", r.types, r.text.String(), r.final)
			}
			// The first attempt's model call ended with its replica.
			waitFor(t, a.gate.abandoned, "the first attempt to stop")
			if n := b.gate.calls.Load(); n != 1 {
				t.Errorf("the second attempt made %d model calls", n)
			}
			final, err := cb.Responses.Get(t.Context(), got.id, responses.ResponseGetParams{})
			if err != nil || final.Status != "completed" || final.OutputText() != r.text.String() || !final.Background {
				t.Errorf("get on the new replica: %v %+v", err, final)
			}
			// From the start, one in_progress per attempt, one terminal
			// event.
			all := readStream(t, cb.Responses.GetStreaming(t.Context(), got.id, responses.ResponseGetParams{}), "")
			contiguous(t, all.seqs, 0)
			count := map[string]int{}
			for _, typ := range all.types {
				count[typ]++
			}
			if count["response.created"] != 1 || count["response.in_progress"] != 2 || count["response.completed"] != 1 {
				t.Errorf("events from the start: %v", all.types)
			}
		})
	}
}

// TestBackgroundAttemptsBounded: a run interrupted at each of its 3
// attempts is not run a fourth time: it fails, saying so, without another
// model call.
func TestBackgroundAttemptsBounded(t *testing.T) {
	dir := t.TempDir()
	var id string
	for attempt := 1; attempt <= 3; attempt++ {
		e := newBgEnv(t, newGate(fakeGateway(t), true), Options{DataDir: dir})
		if attempt == 1 {
			c := e.client("alice")
			r, err := c.Responses.New(t.Context(), bgParams("interrupted"))
			if err != nil {
				t.Fatal(err)
			}
			id = r.ID
		}
		waitFor(t, e.gate.entered, "the model call")
		e.close() // the process stops mid-call
	}
	e := newBgEnv(t, newGate(fakeGateway(t), false), Options{DataDir: dir})
	got := poll(t, e.client("alice"), id, responses.ResponseStatusFailed)
	if got.Error.Code != "server_error" || !strings.Contains(got.Error.Message, "interrupted 3 times") {
		t.Errorf("error %+v", got.Error)
	}
	if n := e.gate.calls.Load(); n != 0 {
		t.Errorf("%d model calls on the fourth start", n)
	}
}
