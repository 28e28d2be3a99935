package pgdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reconnection backoff of Notify's listening connection: the first retry
// waits minListenBackoff, each next one twice as long, up to
// maxListenBackoff. Callers poll as well, which covers the time without a
// listener.
const (
	minListenBackoff = 100 * time.Millisecond
	maxListenBackoff = 5 * time.Second
)

// Notify LISTENs on channel over a dedicated connection (outside pool, with
// its configuration) and returns a channel that receives a value
// (coalesced) after every notification, and after each (re)connection,
// since notifications may have been missed while it was down. A broken
// connection is replaced after a backoff doubling from 100 ms to 5 s. The
// channel is closed when ctx ends.
func Notify(ctx context.Context, pool *pgxpool.Pool, channel string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		wake := func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		backoff := minListenBackoff
		for ctx.Err() == nil {
			listen(ctx, pool, channel, wake, func() { backoff = minListenBackoff })
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxListenBackoff)
		}
	}()
	return ch
}

// listen holds one listening connection until it fails or ctx ends.
func listen(ctx context.Context, pool *pgxpool.Pool, channel string, wake, connected func()) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return
	}
	connected()
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return
		}
		wake()
	}
}
