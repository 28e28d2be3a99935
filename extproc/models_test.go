package extproc

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

func modelsRequest(method, path, key string) headers {
	return headers{":method": method, ":path": path, "authorization": "Bearer " + key}
}

func TestModels(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	get := func(t *testing.T, path, key string) (int, []byte) {
		t.Helper()
		hs := modelsRequest("GET", path, key)
		r := h.open(t).do(hs.request(true))
		ir := r.GetImmediateResponse()
		if ir == nil {
			t.Fatalf("GET %s: want an immediate response, got %v", path, r)
		}
		if ct := setHeaders(ir.GetHeaders())["content-type"]; ct != "application/json" {
			t.Errorf("content-type %q", ct)
		}
		return int(ir.GetStatus().GetCode()), ir.GetBody()
	}
	type model struct {
		ID            string   `json:"id"`
		Object        string   `json:"object"`
		Created       int64    `json:"created"`
		OwnedBy       string   `json:"owned_by"`
		ContextWindow int      `json:"context_window"`
		Capabilities  []string `json:"capabilities"`
	}

	t.Run("list", func(t *testing.T) {
		status, body := get(t, "/v1/models", goodKey)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		schematest.Conforms(t, "ListModelsResponse", body)
		var list struct {
			Object string  `json:"object"`
			Data   []model `json:"data"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		want := []string{"acme/chat", "acme/weighted", "acme/fast", "acme/strict", "acme/lenient", "acme/embed", "acme/embed-small"}
		if list.Object != "list" || len(ids) != len(want) {
			t.Fatalf("list = %s", body)
		}
		for i := range want {
			if ids[i] != want[i] {
				t.Errorf("ids = %v, want %v (catalog order)", ids, want)
				break
			}
		}
		embed := list.Data[5]
		if embed.Object != "model" || embed.OwnedBy != "acme" || embed.Created == 0 || embed.ContextWindow != 16 ||
			len(embed.Capabilities) != 1 || embed.Capabilities[0] != "embeddings" {
			t.Errorf("acme/embed = %+v", embed)
		}
		if c := list.Data[0]; c.ContextWindow != 128000 || len(c.Capabilities) != 2 {
			t.Errorf("acme/chat = %+v, want the defaults", c)
		}
	})

	t.Run("list respects the key's allow-list", func(t *testing.T) {
		_, body := get(t, "/v1/models", narrowKey)
		var list struct{ Data []model }
		_ = json.Unmarshal(body, &list)
		if len(list.Data) != 2 || list.Data[0].ID != "acme/fast" || list.Data[1].ID != "acme/embed" {
			t.Errorf("list = %s", body)
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, path := range []string{"/v1/models/" + url.PathEscape("acme/embed"), "/v1/models/acme/embed", "/v1/models/acme%2fembed?x=1"} {
			status, body := get(t, path, narrowKey)
			if status != 200 {
				t.Fatalf("%s: status %d: %s", path, status, body)
			}
			schematest.Conforms(t, "Model", body)
			var m model
			if err := json.Unmarshal(body, &m); err != nil || m.ID != "acme/embed" || m.Object != "model" {
				t.Errorf("%s: %s", path, body)
			}
		}
	})

	t.Run("unknown or not allowed", func(t *testing.T) {
		for _, tc := range []struct{ path, key string }{
			{"/v1/models/acme%2Fnope", goodKey},
			{"/v1/models/acme%2Fchat", narrowKey},
		} {
			r := h.open(t).do(modelsRequest("GET", tc.path, tc.key).request(true))
			wantImmediate(t, r, 404, "model_not_found", "model")
		}
	})

	t.Run("needs a key", func(t *testing.T) {
		r := h.open(t).do(headers{":method": "GET", ":path": "/v1/models"}.request(true))
		wantImmediate(t, r, 401, "invalid_api_key", "")
	})

	t.Run("other methods", func(t *testing.T) {
		r := h.open(t).do(modelsRequest("DELETE", "/v1/models/acme%2Fchat", goodKey).request(true))
		wantImmediate(t, r, 405, "", "")
		if got := setHeaders(r.GetImmediateResponse().GetHeaders())["allow"]; got != "GET" {
			t.Errorf("allow = %q", got)
		}
	})

	t.Run("created is stable across catalogs", func(t *testing.T) {
		_, before := get(t, "/v1/models/acme%2Fchat", goodKey)
		if err := h.srv.SetCatalog(routingCatalog()); err != nil {
			t.Fatal(err)
		}
		_, after := get(t, "/v1/models/acme%2Fchat", goodKey)
		if string(before) != string(after) {
			t.Errorf("before %s, after %s", before, after)
		}
	})
}
