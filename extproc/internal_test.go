package extproc

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

const internalTestToken = "internal-token-0123456789abcdef0123456789"

// internalHeaders are a backend's call on an owner's behalf.
func internalHeaders(path, token, owner, origin string) []string {
	return []string{":method", "POST", ":path", path, "authorization", "Bearer " + token,
		catalog.OnBehalfOfHeader, owner, catalog.OriginHeader, origin}
}

func TestBackendPathsCarryTheCaller(t *testing.T) {
	h := newLimitHarness(t, nil)
	h.srv.internalToken = internalTestToken
	for _, path := range []string{"/v1/files", "/v1/files/file-abc/content", "/v1/batches?limit=2", "/v1/responses/resp_1", "/v1/conversations/conv_1/items"} {
		t.Run(path, func(t *testing.T) {
			// A client's forged caller headers are removed and replaced.
			resp := h.open(t).do(reqHeaders(false, ":method", "GET", ":path", path, "authorization", "Bearer "+rotatedKey,
				catalog.OwnerHeader, "key_someone_else", catalog.TokenHeader, "guess"))
			hm := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
			if hm == nil {
				t.Fatalf("want a request headers reply, got %v", resp)
			}
			set := setHeaders(hm)
			want := map[string]string{catalog.OwnerHeader: "key_first", catalog.KeyIDHeader: "key_new",
				catalog.TierHeader: "free", catalog.TokenHeader: internalTestToken}
			for k, v := range want {
				if set[k] != v {
					t.Errorf("%s = %q, want %q", k, set[k], v)
				}
			}
			removed := map[string]bool{}
			for _, r := range hm.GetRemoveHeaders() {
				removed[r] = true
			}
			for _, k := range []string{"authorization", catalog.OwnerHeader, catalog.TokenHeader} {
				if !removed[k] {
					t.Errorf("%s not removed (removed: %v)", k, hm.GetRemoveHeaders())
				}
			}
			if m := resp.GetModeOverride(); m == nil || m.GetRequestBodyMode() != 0 {
				t.Errorf("backend bodies must stream through unread; mode %v", m)
			}
		})
	}
	t.Run("unauthenticated", func(t *testing.T) {
		resp := h.open(t).do(reqHeaders(false, ":method", "GET", ":path", "/v1/files"))
		wantImmediate(t, resp, 401, "invalid_api_key", "")
	})
}

func TestInternalCalls(t *testing.T) {
	h := newLimitHarness(t, nil)
	h.srv.internalToken = internalTestToken

	// The free key spends its 10 requests of the minute.
	for range 10 {
		if _, resp := h.chat(t, freeKey, chatBody("local/llama")); resp.GetRequestBody() == nil {
			t.Fatalf("refused: %v", resp)
		}
	}

	t.Run("batch lines are outside the requests per minute and charged to the tokens", func(t *testing.T) {
		for range 3 {
			e := h.open(t)
			if r := e.do(reqHeaders(false, internalHeaders(chatPath, internalTestToken, "key_free", catalog.OriginBatch)...)); r.GetImmediateResponse() != nil {
				t.Fatalf("headers refused: %v", r)
			}
			resp := e.do(reqBody(chatBody("local/llama")))
			if resp.GetRequestBody() == nil {
				t.Fatalf("batch line refused: %v", resp)
			}
			md := metaFields(t, resp)
			if md["key_id"] != "key_free" {
				t.Errorf("batch metadata lacks key_id (the stream-end charge reads it): %v", md)
			}
			if md["owner"] != "key_free" || md["origin"] != catalog.OriginBatch || md["model"] != "local/llama" {
				t.Errorf("batch metadata = %v", md)
			}
		}
	})
	t.Run("responses calls are admitted like the owner's own", func(t *testing.T) {
		e := h.open(t)
		if r := e.do(reqHeaders(false, internalHeaders(chatPath, internalTestToken, "key_free", catalog.OriginResponses)...)); r.GetImmediateResponse() != nil {
			t.Fatalf("headers refused: %v", r)
		}
		wantImmediate(t, e.do(reqBody(chatBody("local/llama"))), 429, "rate_limit_exceeded", "")

		e = h.open(t)
		if r := e.do(reqHeaders(false, internalHeaders(chatPath, internalTestToken, "key_standard", catalog.OriginResponses)...)); r.GetImmediateResponse() != nil {
			t.Fatalf("headers refused: %v", r)
		}
		resp := e.do(reqBody(chatBody("local/llama")))
		if md := metaFields(t, resp); md["key_id"] != "key_standard" || md["origin"] != catalog.OriginResponses {
			t.Errorf("responses metadata = %v", md)
		}
	})
	t.Run("a client cannot act for another owner", func(t *testing.T) {
		// Without the token the header is ignored (and removed): the
		// request is the client's own, still over its limit.
		e := h.open(t)
		r := e.do(reqHeaders(false, internalHeaders(chatPath, freeKey, "key_standard", catalog.OriginBatch)...))
		if r.GetImmediateResponse() != nil {
			// The client's own key is known to be over its limit by now:
			// refused on its headers, before its body (overlimit.go).
			wantImmediate(t, r, 429, "rate_limit_exceeded", "")
			return
		}
		removed := map[string]bool{}
		for _, n := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders() {
			removed[n] = true
		}
		if !removed[catalog.OnBehalfOfHeader] || !removed[catalog.OriginHeader] {
			t.Errorf("forged headers not removed: %v", r)
		}
		wantImmediate(t, e.do(reqBody(chatBody("local/llama"))), 429, "rate_limit_exceeded", "")
	})
	for _, tt := range []struct {
		name, token, owner, origin string
	}{
		{"wrong token", "internal-token-0123456789abcdef0123456789x", "key_free", catalog.OriginBatch},
		{"unknown owner", internalTestToken, "key_nobody", catalog.OriginBatch},
		{"no owner", internalTestToken, "", catalog.OriginBatch},
		{"unknown origin", internalTestToken, "key_free", "elsewhere"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.open(t).do(reqHeaders(false, internalHeaders(chatPath, tt.token, tt.owner, tt.origin)...))
			wantImmediate(t, resp, 401, "invalid_api_key", "")
		})
	}
	t.Run("no internal token configured", func(t *testing.T) {
		h.srv.internalToken = ""
		defer func() { h.srv.internalToken = internalTestToken }()
		resp := h.open(t).do(reqHeaders(false, internalHeaders(chatPath, "", "key_free", catalog.OriginBatch)...))
		wantImmediate(t, resp, 401, "invalid_api_key", "")
	})
}
