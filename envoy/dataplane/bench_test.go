package dataplane

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

func benchProxy(b *testing.B, extProc bool) {
	fp, addr := startProc(b)
	fp.setScript(routeToModel(testModel))
	up := newUpstream(b, nil)
	dp := New(Options{Logger: discardLogger(), StaticClusters: map[string]string{catalog.ExtProcCluster: addr}})
	b.Cleanup(func() { _ = dp.Close() })
	r := buildResources(b, up.URL, resOpts{noExtProc: !extProc, routes: defaultRoutes(b, filesRoute(b, nil))})
	if err := dp.Apply(b.Context(), r); err != nil {
		b.Fatal(err)
	}
	path := "/v1/files"
	if extProc {
		path = "/v1/chat/completions"
	}
	url := "http://" + dp.Addr(testListener).String() + path
	body := strings.Repeat("x", 1024)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// BenchmarkProxyPassthrough measures the proxy alone: no ext_proc, a 1 KiB
// request and a small response.
func BenchmarkProxyPassthrough(b *testing.B) { benchProxy(b, false) }

// BenchmarkProxyExtProc adds the ext_proc round trips the control plane
// configures (headers, buffered body, response headers).
func BenchmarkProxyExtProc(b *testing.B) { benchProxy(b, true) }
