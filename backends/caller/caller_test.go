package caller

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRequire: only a request with the internal token and an owner reaches
// the handler, carrying the caller; anything else is a 401 in OpenAI's shape.
func TestRequire(t *testing.T) {
	var got *Caller
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := From(r.Context())
		if ok {
			got = &c
		}
	})
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name, internal, token, owner string
		pass                         bool
	}{
		{"valid", "secret", "secret", "owner-1", true},
		{"wrong token", "secret", "secreT", "owner-1", false},
		{"token prefix", "secret", "secre", "owner-1", false},
		{"no token", "secret", "", "owner-1", false},
		{"no owner", "secret", "secret", "", false},
		{"empty internal token matches nothing", "", "", "owner-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			r := httptest.NewRequest(http.MethodGet, "/v1/files", nil)
			if tt.token != "" {
				r.Header.Set(TokenHeader, tt.token)
			}
			if tt.owner != "" {
				r.Header.Set(OwnerHeader, tt.owner)
			}
			r.Header.Set(KeyIDHeader, "key-2")
			r.Header.Set(TierHeader, "gold")
			rec := httptest.NewRecorder()
			Require(tt.internal, log, next).ServeHTTP(rec, r)
			if !tt.pass {
				var body struct {
					Error struct {
						Code *string `json:"code"`
					} `json:"error"`
				}
				if rec.Code != http.StatusUnauthorized || got != nil ||
					json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code == nil || *body.Error.Code != "invalid_api_key" {
					t.Fatalf("refused request: %d %s (handler ran: %v)", rec.Code, rec.Body, got != nil)
				}
				return
			}
			if got == nil || *got != (Caller{Owner: "owner-1", KeyID: "key-2", Tier: "gold"}) {
				t.Fatalf("caller %+v, status %d", got, rec.Code)
			}
		})
	}
}

func TestOf(t *testing.T) {
	tests := []struct {
		name   string
		ctx    func(context.Context) context.Context
		wantOK bool
	}{
		{"no caller", func(ctx context.Context) context.Context { return ctx }, false},
		{"no owner", func(ctx context.Context) context.Context { return With(ctx, Caller{KeyID: "k"}) }, false},
		{"a caller", func(ctx context.Context) context.Context { return With(ctx, Caller{Owner: "o", KeyID: "k"}) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/files", nil)
			r = r.WithContext(tt.ctx(r.Context()))
			w := httptest.NewRecorder()
			c, ok := Of(w, r)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if ok {
				if c.Owner != "o" || w.Body.Len() != 0 {
					t.Errorf("caller %+v, body %q", c, w.Body.String())
				}
				return
			}
			if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), `"code":"invalid_api_key"`) {
				t.Errorf("answer %d %s, want 401 invalid_api_key", w.Code, w.Body.String())
			}
		})
	}
}
