package keys_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/keys/keystest"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func openPostgres(t *testing.T, dsn string) *keys.PostgresStore {
	t.Helper()
	s, err := keys.OpenPostgres(context.Background(), dsn, pgdb.Pool{})
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPostgresStore is the PostgreSQL run of the key store suite.
func TestPostgresStore(t *testing.T) {
	keystest.Run(t, func(t *testing.T) keystest.Store { return openPostgres(t, pgtest.DSN(t)) })
}

// TestPostgresShared runs the shared-storage checks on two stores on one
// database: two replicas (or a replica and the CLI).
func TestPostgresShared(t *testing.T) {
	keystest.RunShared(t, func(t *testing.T) (keystest.Store, keystest.Store) {
		dsn := pgtest.DSN(t)
		return openPostgres(t, dsn), openPostgres(t, dsn)
	})
}

// waitRefused waits, up to bound, for c to refuse secret, and fails the
// test if it still accepts it then.
func waitRefused(t *testing.T, c *keys.Cache, secret string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, err := c.Lookup(context.Background(), secret)
		if errors.Is(err, keys.ErrNotFound) {
			return time.Since(start)
		}
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		if time.Since(start) > bound {
			t.Fatalf("the cache still accepts the key %s after the revocation", bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPostgresRevocationReachesOtherReplica: a key revoked through one
// handle is refused by a Cache over another within 2 s, by notification
// alone (Watch's poll interval is an hour, so only NOTIFY can wake it).
func TestPostgresRevocationReachesOtherReplica(t *testing.T) {
	dsn := pgtest.DSN(t)
	admin, replica := openPostgres(t, dsn), openPostgres(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := keys.NewCache(replica, 0, time.Hour)
	go cache.Watch(ctx, time.Hour, nil)

	for _, change := range []struct {
		name string
		do   func(id string) error
	}{
		{"revoke", func(id string) error { return admin.Revoke(ctx, id) }},
		{"rotate without grace", func(id string) error { _, _, err := admin.Rotate(ctx, id, 0); return err }},
	} {
		t.Run(change.name, func(t *testing.T) {
			secret, k, err := admin.Issue(ctx, keys.Spec{Name: change.name, Tier: "free"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cache.Lookup(ctx, secret); err != nil {
				t.Fatalf("Lookup before the change: %v", err)
			}
			if err := change.do(k.ID); err != nil {
				t.Fatal(err)
			}
			took := waitRefused(t, cache, secret, 2*time.Second)
			t.Logf("refused %s after the change", took)
		})
	}
	t.Run("tier change", func(t *testing.T) {
		secret, k, err := admin.Issue(ctx, keys.Spec{Name: "tiered", Tier: "free"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cache.Lookup(ctx, secret); err != nil || got.Tier != "free" {
			t.Fatalf("Lookup = %+v, %v", got, err)
		}
		if _, err := admin.SetTier(ctx, k.ID, "enterprise", 10, 100); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			got, err := cache.Lookup(ctx, secret)
			if err != nil {
				t.Fatal(err)
			}
			if got.Tier == "enterprise" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the tier change did not reach the cache within 2s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// TestPostgresNotifyReconnects: when the listening connection is killed,
// Notify reconnects (waking its reader, since changes may have been
// missed) and goes on delivering notifications.
func TestPostgresNotifyReconnects(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, writer := openPostgres(t, dsn), openPostgres(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := s.Notify(ctx)
	wait := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no notification within 5s: %s", what)
		}
	}
	wait("the first connection")
	if _, _, err := writer.Issue(ctx, keys.Spec{Name: "a", Tier: "free"}); err != nil {
		t.Fatal(err)
	}
	wait("a key created through another handle")

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d listening connections (%v), want 1", killed, err)
	}
	wait("the reconnection")
	if _, _, err := writer.Issue(ctx, keys.Spec{Name: "b", Tier: "free"}); err != nil {
		t.Fatal(err)
	}
	wait("a key created after the reconnection")

	cancel()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel was not closed when ctx ended")
	}
}

// TestPostgresBlinkKeepsCachedKeys: while the database refuses every
// connection (its sessions killed and new ones barred), a Cache with an
// outage grace keeps answering the keys it holds and cannot verify the
// others; once the database is back, it works as before.
func TestPostgresBlinkKeepsCachedKeys(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := pgtest.DSN(t)
	s := openPostgres(t, dsn)
	secret, _, err := s.Issue(ctx, keys.Spec{Name: "cached", Tier: "free"})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := s.Issue(ctx, keys.Spec{Name: "not cached", Tier: "free"})
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{}, 1)
	polled := &pollSignal{PostgresStore: s, polls: make(chan struct{}, 2)}
	c := keys.NewCache(polled, 0, time.Minute, keys.WithOutageGrace(time.Minute))
	go c.Watch(ctx, 20*time.Millisecond, func(error) {
		select {
		case failed <- struct{}{}:
		default:
		}
	})
	// Cache the key once Watch has handled its first poll (which drops
	// what was cached before it): its second has begun.
	for range 2 {
		<-polled.polls
	}
	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}

	// The database is barred from another one: PostgreSQL refuses it
	// from a session of its own.
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.Database
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	allow := func(on bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", pgx.Identifier{db}.Sanitize(), on)); err != nil {
			t.Fatal(err)
		}
	}
	allow(false)
	defer allow(true)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, db); err != nil {
		t.Fatal(err)
	}
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not notice the database was gone")
	}
	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Errorf("Lookup of a cached key while the database is down: %v", err)
	}
	if _, err := c.Lookup(ctx, other); err == nil || errors.Is(err, keys.ErrNotFound) {
		t.Errorf("Lookup of a key not cached while the database is down: err = %v, want the store's error", err)
	}
	allow(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Lookup(ctx, other)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lookup once the database is back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pollSignal is the store with a signal per version read Watch makes.
type pollSignal struct {
	*keys.PostgresStore
	polls chan struct{}
}

func (p *pollSignal) Version(ctx context.Context) (int64, error) {
	defer func() {
		select {
		case p.polls <- struct{}{}:
		default:
		}
	}()
	return p.PostgresStore.Version(ctx)
}
