package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// TestDataPlaneOutlivesControlPlane: a data plane started on its own
// (`switchyard dataplane`) with an extproc beside it serves the
// configuration of an external control plane, keeps serving it while the
// control plane is gone, and picks up the configuration of the control
// plane that comes back on the same address.
func TestDataPlaneOutlivesControlPlane(t *testing.T) {
	ctx := t.Context()
	_, vendor, err := fake.Start(ctx, "127.0.0.1:0", fake.KindOpenAI, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("test", []byte(fmt.Sprintf(`
listeners: [{name: public, address: 127.0.0.1:18080}]
providers: [{name: v, kind: openai, base_url: "http://%s/v1"}]
models: [{id: m/chat, providers: [{provider: v, upstream_model: fake-chat-1}]}]
tiers: {standard: {rpm: 600, tpm: 100000}}
`, vendor)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := keys.OpenSQLite(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := store.Issue(ctx, keys.Spec{Name: "t", Tier: "standard"})
	store.Close()
	if err != nil {
		t.Fatal(err)
	}

	startCP := func(addr string) *Component {
		cp, err := StartControlPlane(ctx, ControlPlaneOptions{Config: cfg, Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	cp := startCP("127.0.0.1:0")
	xds := cp.Addr.String()
	ep, err := StartExtProc(ctx, ExtProcOptions{XDS: xds, Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	dp, err := StartDataPlane(ctx, DataPlaneOptions{XDS: xds, ExtProc: ep.Addr.String(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := dp.WaitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	chat := func() (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+dp.ListenAddr()+"/v1/chat/completions",
			strings.NewReader(`{"model":"m/chat","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("authorization", "Bearer "+secret)
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// extproc gets its catalog asynchronously; the first answer may be
	// its not-ready refusal.
	waitOK := func(what string) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body := chat()
			if code == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %s", what, code, body)
			}
			time.Sleep(10 * time.Millisecond) // polling for extproc's catalog
		}
	}
	waitOK("with the control plane")

	cp.Close()
	for i := range 20 {
		if code, body := chat(); code != http.StatusOK {
			t.Fatalf("request %d without the control plane: %d %s", i, code, body)
		}
	}
	if !dp.Ready() {
		t.Fatal("the data plane reports not ready without its control plane")
	}

	// The control plane comes back on the same address: the data plane
	// and extproc re-subscribe, and keep serving meanwhile.
	cp = startCP(xds)
	defer cp.Close()
	for i := range 20 {
		if code, body := chat(); code != http.StatusOK {
			t.Fatalf("request %d after the control plane came back: %d %s", i, code, body)
		}
	}
}
