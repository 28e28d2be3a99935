package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// TestAdminAPIOnSplitControlPlane: in a split deployment (control plane,
// extproc and a data plane as separate components, as deploy/ runs them),
// the control plane's admin API manages keys and routes for the whole
// fleet: a key it issues is accepted by extproc, a drain takes the provider
// out of the data plane's routes and an undrain puts it back, and a
// revocation is refused, without restarting anything.
func TestAdminAPIOnSplitControlPlane(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var atB atomic.Int64 // requests reaching the second provider
	s := newSplitStackWith(t, ctx, func(apiKey string) http.Handler {
		next := fake.NewOpenAI(fake.Options{APIKey: apiKey})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			atB.Add(1)
			next.ServeHTTP(w, r)
		})
	})
	s.startDataPlane(t, ctx)

	adminCall := func(method, path string, body any) (int, []byte) {
		t.Helper()
		return adminDo(t, s.adminURL, s.adminToken, method, path, body)
	}
	chat := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.listen+"/v1/chat/completions",
			bytes.NewReader([]byte(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`)))
		req.Header.Set("authorization", "Bearer "+key)
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code, _ := adminCall(http.MethodGet, "/admin/v1/keys", nil); code != http.StatusOK {
		t.Fatalf("admin API on the control plane: GET keys = %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, s.adminURL+"/admin/v1/keys", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin API without the token: %v %v", resp.StatusCode, err)
	}

	code, body := adminCall(http.MethodPost, "/admin/v1/keys", map[string]string{"name": "via-controlplane", "tier": "standard"})
	var created struct{ ID, Secret string }
	if code != http.StatusCreated || json.Unmarshal(body, &created) != nil || created.Secret == "" {
		t.Fatalf("create key: %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "extproc to accept the key the control plane issued", func() bool { return chat(created.Secret) == http.StatusOK })

	if atB.Load() != 0 {
		t.Fatalf("the second provider served %d requests while the first was up", atB.Load())
	}
	if code, body := adminCall(http.MethodPost, "/admin/v1/providers/fake-openai/drain", nil); code != http.StatusOK {
		t.Fatalf("drain: %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "the drain to move demo/chat to the second provider", func() bool {
		before := atB.Load()
		return chat(created.Secret) == http.StatusOK && atB.Load() == before+1
	})
	if code, body := adminCall(http.MethodPost, "/admin/v1/providers/fake-openai/undrain", nil); code != http.StatusOK {
		t.Fatalf("undrain: %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "the undrain to bring demo/chat back to the first provider", func() bool {
		before := atB.Load()
		return chat(created.Secret) == http.StatusOK && atB.Load() == before
	})

	if code, body := adminCall(http.MethodPost, "/admin/v1/keys/"+created.ID+"/revoke", nil); code != http.StatusOK {
		t.Fatalf("revoke: %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "extproc to refuse the revoked key", func() bool { return chat(created.Secret) == http.StatusUnauthorized })
	if code, _ := adminCall(http.MethodGet, "/readyz", nil); code != http.StatusOK {
		t.Errorf("control plane readiness = %d", code)
	}
}
