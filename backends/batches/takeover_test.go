package batches

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// countingGateway counts the requests of each line (by the text of its
// message, "line N") on their way to the fake vendor. Once it has passed
// `pass` requests, when pass > 0, it holds every further one until its
// context ends without forwarding it: lines in flight on a replica that
// then dies.
type countingGateway struct {
	next Gateway
	pass int

	mu      *sync.Mutex // shared by the replicas' gateways, with counts
	counts  map[string]int
	sent    int
	held    map[string]bool
	heldNow chan int // receives len(held) as it grows
}

func (g *countingGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	key := gjson.GetBytes(b, "messages.0.content").Str
	g.mu.Lock()
	g.counts[key]++
	g.sent++
	hold := g.pass > 0 && g.sent > g.pass
	if hold {
		g.held[key] = true
		n := len(g.held)
		g.mu.Unlock()
		select {
		case g.heldNow <- n:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	g.mu.Unlock()
	return g.next.Do(ctx, owner, origin, method, path, bytes.NewReader(b))
}

// noRelease is a dead replica's view of the store: it never gets to give
// its leases back.
type noRelease struct{ Store }

func (noRelease) Release(context.Context, string, string) error { return nil }

// TestTakeover: two runners on one PostgreSQL. The first runs a batch of
// 200 lines halfway and dies (its context ends without releasing its
// lease, lines held in flight); the second, running all along, takes the
// batch over once the lease expires and completes it. Every custom_id has
// exactly one output line, and only the lines in flight on the dead
// replica reached the vendor twice.
func TestTakeover(t *testing.T) {
	const (
		n           = 200
		concurrency = 4
		lease       = 300 * time.Millisecond
	)
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", "openai", fake.Options{APIKey: testToken})
	if err != nil {
		t.Fatal(err)
	}
	vendor := onbehalf.New("http://"+addr.String()+"/v1", testToken)
	fs, err := files.Open(ctx, t.TempDir(), files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })

	counts := map[string]int{}
	var mu sync.Mutex
	newReplica := func(name string, pass int) (*Service, *countingGateway, *PostgresStore) {
		st, err := OpenPostgresStore(ctx, dsn, pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		gw := &countingGateway{next: vendor, pass: pass, mu: &mu, counts: counts, held: map[string]bool{}, heldNow: make(chan int, n)}
		var store Store = st
		if pass > 0 {
			store = noRelease{st}
		}
		svc, err := New(ctx, Options{DataDir: t.TempDir(), Store: store, Results: NewPostgresResults(st.Pool(), nil),
			Files: fs, Gateway: gw, ReplicaID: name, Lease: lease, ClaimInterval: 20 * time.Millisecond,
			Concurrency: concurrency, ProgressInterval: 20 * time.Millisecond, RetryBackoff: time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		return svc, gw, st
	}
	a, gwA, stA := newReplica("replica-a", n/2)
	b, _, _ := newReplica("replica-b", 0)

	e := &env{t: t, files: fs, svc: a}
	fileID := e.upload("alice", "batch", chatLines(n))
	created := e.create("alice", fileID, "/v1/chat/completions")

	runA, killA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(runA) }()

	// Wait until replica A holds `concurrency` lines in flight past the
	// first n/2, then start B (its claims must fail while A's lease lives).
	deadline := time.After(30 * time.Second)
	for held := 0; held < concurrency; {
		select {
		case held = <-gwA.heldNow:
		case <-deadline:
			t.Fatal("replica A never had its lines in flight")
		}
	}
	runB, stopB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- b.Run(runB) }()
	t.Cleanup(func() { stopB(); <-doneB })

	// B cannot take the batch while A renews its lease: the batch stays A's.
	if id, err := stA.Claim(ctx, "replica-c", lease); err != nil || id != "" {
		t.Fatalf("claim of a leased batch: %q, %v", id, err)
	}
	// A dies: its context ends, its lease is not released.
	killA()
	select {
	case err := <-doneA:
		if err != nil {
			t.Fatalf("A's Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A's Run did not return")
	}

	got, _ := e.wait("alice", created.ID, "completed", func(v batchView) bool { return v.Status == StatusCompleted })
	if got.RequestCounts.Completed != n || got.RequestCounts.Failed != 0 {
		t.Errorf("request_counts %+v, want %d completed", got.RequestCounts, n)
	}
	out := e.lines("alice", got.OutputFileID)
	perID := map[string]int{}
	for _, l := range out {
		perID[l.CustomID]++
	}
	for i := range n {
		if c := perID[fmt.Sprintf("req-%d", i)]; c != 1 {
			t.Errorf("req-%d has %d output lines, want 1", i, c)
		}
	}
	if len(out) != n {
		t.Errorf("%d output lines, want %d", len(out), n)
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for i := range n {
		key := fmt.Sprintf("line %d", i)
		switch c := counts[key]; {
		case c == 1:
		case c == 2 && gwA.held[key]:
			twice++
		default:
			t.Errorf("%s reached the vendor %d times (held on A: %v)", key, c, gwA.held[key])
		}
	}
	t.Logf("%d lines sent twice (in flight on the dead replica: %d)", twice, len(gwA.held))
	if twice > concurrency {
		t.Errorf("%d lines sent twice, want at most the %d in flight", twice, concurrency)
	}
}
