package vectorstores

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// statusTransport makes the fake upstream answer every later request with
// an injected status (x-fake-status).
type statusTransport struct {
	base   http.RoundTripper
	status string
}

func (s *statusTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.status != "" {
		req = req.Clone(req.Context())
		req.Header.Set(fake.HeaderStatus, s.status)
	}
	return s.base.RoundTrip(req)
}

// TestQueryEmbeddingRefusals: a search whose query the gateway refuses
// with a 4xx (the owner's key revoked, the embedding model not allowed or
// gone) answers with that status, not a 502. (429 and 5xx are retried with
// back-off first; their mapping is unchanged.)
func TestQueryEmbeddingRefusals(t *testing.T) {
	var tr *statusTransport
	e := newEnv(t, func(o *Options) {
		gw := o.Gateway.(*onbehalf.Client)
		tr = &statusTransport{base: gw.HTTP.Transport}
		gw.HTTP.Transport = tr
	})
	id := e.createStore("alice", `{"name":"empty"}`).Get("id").Str
	for _, tt := range []struct {
		upstream string
		want     int
		code     string
	}{
		{"403", http.StatusForbidden, "embedding_failed"},
		{"401", http.StatusUnauthorized, "embedding_failed"},
		{"404", http.StatusNotFound, "embedding_failed"},
	} {
		t.Run(tt.upstream, func(t *testing.T) {
			tr.status = tt.upstream
			defer func() { tr.status = "" }()
			status, body := e.do("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search", `{"query":"anything"}`)
			if status != tt.want || gjson.GetBytes(body, "error.code").Str != tt.code {
				t.Errorf("upstream %s: %d %s, want %d %s", tt.upstream, status, body, tt.want, tt.code)
			}
		})
	}
}
