package envoy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEnvoyPreStopDrains runs the Envoy container's preStop hook, as the
// kubelet would, with bash against a stand-in for Envoy's admin interface:
// it must start a graceful listener drain first, then wait until no request
// is active, and only then return (Envoy exits on the SIGTERM that follows).
func TestEnvoyPreStopDrains(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is needed to run the hook as the kubelet does")
	}
	var cmd []string
	for _, o := range readYAMLDocs(t, filepath.Join(kubernetesDir, "base", "gateway.yaml")) {
		if str(o["kind"]) != "Deployment" {
			continue
		}
		for _, c := range asList(get(o, "spec", "template", "spec", "containers")) {
			if str(get(c, "name")) == "envoy" {
				cmd = strs(get(c, "lifecycle", "preStop", "exec", "command"))
			}
		}
	}
	if len(cmd) != 3 || !strings.Contains(cmd[2], "127.0.0.1/9901") {
		t.Fatalf("the envoy container's preStop is not the bash drain: %q", cmd)
	}

	var mu sync.Mutex
	var calls []string
	active := 2 // requests in flight: one finishes per stats poll after the drain
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/drain_listeners" && r.URL.Query().Has("graceful"):
			fmt.Fprintln(w, "OK")
		case r.Method == http.MethodGet && r.URL.Path == "/stats":
			fmt.Fprintf(w, "http.ingress.downstream_rq_active: %d\nhttp.readiness.downstream_rq_active: 0\n", active)
			if active > 0 {
				active--
			}
		default:
			http.Error(w, "unexpected", http.StatusBadRequest)
		}
	})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()

	_, port, _ := net.SplitHostPort(lis.Addr().String())
	script := strings.ReplaceAll(cmd[2], "127.0.0.1/9901", "127.0.0.1/"+port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cmd[0], cmd[1], script).CombinedOutput(); err != nil {
		t.Fatalf("preStop: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /drain_listeners", "GET /stats", "GET /stats", "GET /stats"}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Errorf("admin calls = %q, want %q (drain first, then poll until no request is active)", calls, want)
	}
}
