package fake

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// These benchmarks keep the fake cheap: gateway benchmarks run against it, so
// its own cost must stay small next to what they measure.

func benchServe(b *testing.B, body string, headers ...string) {
	h := NewOpenAI(Options{})
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

func BenchmarkCompletion(b *testing.B) {
	benchServe(b, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hello there, how are you today?"}]}`)
}

func BenchmarkStream100(b *testing.B) {
	benchServe(b, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`,
		HeaderChunks, "100")
}
