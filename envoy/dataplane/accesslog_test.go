package dataplane

import (
	"bytes"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
)

// lockedBuffer is a bytes.Buffer safe for the data plane's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAccessLogLineMatchesSlog: the access log line written through
// jsonlog's fast path has the fields, order and encoding of the one slog's
// JSONHandler writes from logAccess's attributes (the time, duration and
// upstream port aside, which differ between two requests), metadata of
// every kind included.
func TestAccessLogLineMatchesSlog(t *testing.T) {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"key_id": structpb.NewStringValue(`key "q"` + "\n\u2028<&>"), "tier": structpb.NewStringValue("free"),
		"tpm_limit": structpb.NewNumberValue(5000), "charge_tokens": structpb.NewNumberValue(42),
		"ratio": structpb.NewNumberValue(0.25), "big": structpb.NewNumberValue(1e300), "ok": structpb.NewBoolValue(true),
		"none": structpb.NewNullValue(), "status": structpb.NewStringValue("shadowed"),
		"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("a"), structpb.NewNumberValue(2)}}),
		"obj": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"z": structpb.NewNumberValue(1), "a": structpb.NewStringValue("<b>\b\f\u2028"),
			"f": structpb.NewNumberValue(1e21), "g": structpb.NewNumberValue(0.1), "h": structpb.NewNumberValue(1e-7), "i": structpb.NewNumberValue(5000)}}),
		"nan":  structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(math.NaN())}}),
		"tiny": structpb.NewNumberValue(-2.5e-9),
	}}
	script := func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		r, err := routeToModel(testModel)(req)
		if req.GetRequestBody() != nil {
			r.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
				catalog.MetadataNamespace: structpb.NewStructValue(md)}}
		}
		return r, err
	}
	line := func(h func(io.Writer) slog.Handler) string {
		var out lockedBuffer
		e := newEnv(t)
		e.opts.Logger = slog.New(h(&out)).With("component", "dataplane")
		e.dp = New(e.opts)
		t.Cleanup(func() { _ = e.dp.Close() })
		e.apply(resOpts{})
		e.proc.setScript(script)
		req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions?q=secret"), strings.NewReader(`{"model":"m1"}`))
		req.Header.Set("X-Request-Id", "req-\"1\"")
		if resp, body := e.do(req); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if err := e.dp.Close(); err != nil { // the stream-done work is over
			t.Fatal(err)
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, `"msg":"access"`) {
				return l
			}
		}
		t.Fatalf("no access log line in %s", out.String())
		return ""
	}
	fast := line(func(w io.Writer) slog.Handler { return jsonlog.NewHandler(w, nil) })
	ref := line(func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) })
	varying := regexp.MustCompile(`"time":"[^"]*"|"duration_ms":[0-9]+|"upstream_host":"[^"]*"`)
	if got, want := varying.ReplaceAllString(fast, ""), varying.ReplaceAllString(ref, ""); got != want {
		t.Errorf("fast path:\n%s\nslog:\n%s", got, want)
	}
	if !strings.Contains(fast, `"key_id":"key \"q\"\n\u2028<&>"`) || strings.Contains(fast, "secret") {
		t.Errorf("line %s", fast)
	}
}
