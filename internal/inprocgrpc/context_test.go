package inprocgrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// BenchmarkServerContext is one call's server context: made from a client
// context with metadata and a deadline, read as a handler does (metadata,
// Done), and cancelled at the call's end.
func BenchmarkServerContext(b *testing.B) {
	client, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(b.Context(), "k", "v"), time.Minute)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		sctx, end := serverContext(client, "/svc/M", nil)
		if _, ok := metadata.FromIncomingContext(sctx); !ok {
			b.Fatal("no metadata")
		}
		_ = sctx.Done()
		end()
	}
}

// TestServerContext: a call's server context has the client's metadata,
// deadline and cancellation (ending with the client's error), none of its
// other values, and ends with the call; the context package's key it
// relies on is found (else the slower fallback would be in use), and the
// fallback behaves the same.
func TestServerContext(t *testing.T) {
	if cancelKey == nil {
		t.Fatal("the context package's cancellation key was not found")
	}
	t.Run("child of the client's", testServerContext)
	t.Run("fallback", func(t *testing.T) {
		defer func(k any) { cancelKey = k }(cancelKey)
		cancelKey = nil
		testServerContext(t)
	})
}

func testServerContext(t *testing.T) {
	type key struct{}
	base := context.WithValue(metadata.AppendToOutgoingContext(t.Context(), "k", "v"), key{}, "client only")

	client, cancelClient := context.WithCancel(base)
	sctx, end := serverContext(client, "/svc/M", nil)
	if md, _ := metadata.FromIncomingContext(sctx); len(md.Get("k")) != 1 || md.Get("k")[0] != "v" {
		t.Errorf("incoming metadata %v", md)
	}
	if sctx.Value(key{}) != nil {
		t.Error("a client value reached the server")
	}
	if m, _ := grpc.Method(sctx); m != "/svc/M" {
		t.Errorf("method %q", m)
	}
	if p, ok := peer.FromContext(sctx); !ok || p.Addr.String() != "inprocess" {
		t.Errorf("peer %v", p)
	}
	if _, ok := sctx.Deadline(); ok {
		t.Error("a deadline the client does not have")
	}
	cancelClient()
	<-sctx.Done()
	if !errors.Is(sctx.Err(), context.Canceled) {
		t.Errorf("after the client's cancel: %v", sctx.Err())
	}
	end()

	d := time.Now().Add(20 * time.Millisecond)
	client, cancelClient = context.WithDeadline(base, d)
	defer cancelClient()
	sctx, end = serverContext(client, "/svc/M", nil)
	defer end()
	if sd, ok := sctx.Deadline(); !ok || !sd.Equal(d) {
		t.Errorf("deadline %v, want %v", sd, d)
	}
	<-sctx.Done()
	if !errors.Is(sctx.Err(), context.DeadlineExceeded) {
		t.Errorf("past the deadline: %v", sctx.Err())
	}

	client, cancelClient = context.WithCancel(base)
	defer cancelClient()
	sctx, end = serverContext(client, "/svc/M", nil)
	end()
	if !errors.Is(sctx.Err(), context.Canceled) || client.Err() != nil {
		t.Errorf("after the call's end: server %v, client %v", sctx.Err(), client.Err())
	}
}
