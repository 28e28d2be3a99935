package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/keys"
)

// TestModels lists and gets models with the official SDK: extproc answers
// from its catalog, for the models the key may use.
func TestModels(t *testing.T) {
	vs := newVendorStack(t)
	ctx := context.Background()
	c := vs.client()

	t.Run("list", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"vendor/gpt", "vendor/claude", "vendor/gemini", "vendor/failover", "vendor/embed", "vendor/gemini-embed", "vendor/embed-fixed"}
		if len(page.Data) != len(want) {
			t.Fatalf("models %+v, want %v", page.Data, want)
		}
		for i, m := range page.Data {
			if m.ID != want[i] || m.Object != "model" || m.OwnedBy != "vendor" || m.Created == 0 {
				t.Errorf("model %d = %+v", i, m)
			}
		}
		claude := page.Data[1]
		if cw := claude.JSON.ExtraFields["context_window"]; cw.Raw() != "200000" {
			t.Errorf("context_window = %q", cw.Raw())
		}
		if caps := page.Data[4].JSON.ExtraFields["capabilities"]; caps.Raw() != `["embeddings"]` {
			t.Errorf("capabilities = %q", caps.Raw())
		}
		resp, body := vs.get(t, "/models", vs.key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		validateSchema(t, "ListModelsResponse", body)
	})

	t.Run("get", func(t *testing.T) {
		m, err := c.Models.Get(ctx, "vendor/gemini")
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != "vendor/gemini" || m.OwnedBy != "vendor" || m.Created == 0 {
			t.Errorf("model = %+v", m)
		}
		validateSchema(t, "Model", []byte(m.RawJSON()))
		_, err = c.Models.Get(ctx, "vendor/nothing")
		apiError(t, err, http.StatusNotFound, "model_not_found")
	})

	t.Run("a key's allow-list", func(t *testing.T) {
		key, _, err := vs.gw.Keys.Issue(ctx, keys.Spec{Name: "narrow", Tier: "enterprise", RPM: 1000, TPM: 1_000_000,
			Models: []string{"vendor/embed", "vendor/claude"}})
		if err != nil {
			t.Fatal(err)
		}
		c := vs.clientWith(key)
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 2 || page.Data[0].ID != "vendor/claude" || page.Data[1].ID != "vendor/embed" {
			t.Errorf("models = %+v", page.Data)
		}
		_, err = c.Models.Get(ctx, "vendor/gpt")
		apiError(t, err, http.StatusNotFound, "model_not_found")
	})

	t.Run("needs a key", func(t *testing.T) {
		resp, body := vs.get(t, "/models", "")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
	})
}

// get sends a raw GET (for checking the bytes the SDK would parse away).
func (s *stack) get(t *testing.T, path, auth string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.gw.BaseURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
