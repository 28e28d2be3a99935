package dataplane

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/h2grpc"
)

// TestStaticClusterGRPCClient pins which client the ext_proc and rate limit
// filters reach a static cluster with: the Envoy-style one (internal/h2grpc),
// one per cluster for the DataPlane's life.
func TestStaticClusterGRPCClient(t *testing.T) {
	dp := New(Options{Logger: discardLogger(), StaticClusters: map[string]string{"proc": "127.0.0.1:1"}})
	defer dp.Close()
	cc, err := dp.grpcConn("proc")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cc.(*h2grpc.ClientConn); !ok {
		t.Fatalf("static cluster client is %T, want *h2grpc.ClientConn", cc)
	}
	if again, _ := dp.grpcConn("proc"); again != cc {
		t.Fatal("a second filter got another client for the same cluster")
	}
	if _, err := dp.grpcConn("missing"); err == nil {
		t.Fatal("no error for a cluster that is not static")
	}
}
