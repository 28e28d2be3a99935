package controlplane

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// TestBuildProduction checks the production example: backend routes before
// the model routes, and provider clusters with TLS, HTTP/2 where asked, and
// priorities by region.
func TestBuildProduction(t *testing.T) {
	cfg, err := config.Load("../examples/production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Build(cfg, "1")
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap, "1")

	vh := resource[*routev3.RouteConfiguration](t, snap, resourcev3.RouteType, catalog.ListenerRouteConfig).GetVirtualHosts()[0]
	var names []string
	for _, r := range vh.GetRoutes() {
		names = append(names, r.GetName())
	}
	wantRoutes := []string{"backend:/v1/files", "backend:/v1/batches", "backend:/v1/responses", "backend:/v1/conversations", "backend:/v1/vector_stores", "backend:/v1/models",
		"model:openai/gpt-4o-mini@openai", "model:openai/gpt-4o-mini",
		"model:meta/llama-3.3-70b@groq", "model:meta/llama-3.3-70b",
		"model:deepseek/deepseek-chat@deepseek", "model:deepseek/deepseek-chat",
		"model:qwen/qwen2.5-72b@vllm-asia", "model:qwen/qwen2.5-72b", NotFoundRouteName}
	if !slices.Equal(names, wantRoutes) {
		t.Fatalf("routes = %v, want %v", names, wantRoutes)
	}
	for _, r := range vh.GetRoutes()[:len(BackendPaths)] {
		if r.GetMatch().GetPathSeparatedPrefix() == "" || r.GetRoute().GetCluster() != BackendsCluster ||
			r.GetRoute().GetTimeout().AsDuration() != 0 || r.GetRoute().GetTimeout() == nil {
			t.Errorf("backend route %s = %v", r.GetName(), r)
		}
		ov := unpack[*extprocv3.ExtProcPerRoute](t, r.GetTypedPerFilterConfig()[FilterExtProc])
		if !proto.Equal(ov.GetOverrides().GetProcessingMode(), BackendExtProcMode()) {
			t.Errorf("%s: ext_proc override = %v", r.GetName(), ov)
		}
	}
	if m := BackendExtProcMode(); m.GetRequestHeaderMode() != extprocv3.ProcessingMode_SEND || m.GetRequestBodyMode() != extprocv3.ProcessingMode_NONE {
		t.Errorf("backend mode = %v: auth needs request headers, uploads must not be buffered", m)
	}

	backends := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, BackendsCluster)
	if backends.GetType() != clusterv3.Cluster_STRICT_DNS || backends.GetTransportSocket() != nil {
		t.Errorf("backends cluster = %v", backends)
	}
	checkEndpoint(t, backends.GetLoadAssignment(), "switchyard-backends", 8092, "", 0)

	type clusterWant struct {
		http2    bool
		alpn     []string
		sni      string
		san      string
		sanType  tlsv3.SubjectAltNameMatcher_SanType
		ca       string
		priority uint32
	}
	for name, w := range map[string]clusterWant{
		"openai":    {true, []string{"h2"}, "api.openai.com", "api.openai.com", tlsv3.SubjectAltNameMatcher_DNS, config.DefaultUpstreamCAFile, PriorityHomeRegion},
		"groq":      {false, []string{"http/1.1"}, "api.groq.com", "api.groq.com", tlsv3.SubjectAltNameMatcher_DNS, config.DefaultUpstreamCAFile, PriorityHomeRegion},
		"deepseek":  {true, []string{"h2"}, "api.deepseek.com", "api.deepseek.com", tlsv3.SubjectAltNameMatcher_DNS, config.DefaultUpstreamCAFile, PriorityOtherRegion},
		"vllm-asia": {false, []string{"http/1.1"}, "vllm.internal.example", "vllm.internal.example", tlsv3.SubjectAltNameMatcher_DNS, "/etc/switchyard/ca/internal-ca.pem", PriorityOtherRegion},
	} {
		t.Run(name, func(t *testing.T) {
			c := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, catalog.ClusterName(name))
			po := unpack[*upstreamhttpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()[HTTPProtocolOptionsKey])
			if got := po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil; got != w.http2 {
				t.Errorf("http2 = %v", got)
			}
			utc := unpack[*tlsv3.UpstreamTlsContext](t, c.GetTransportSocket().GetTypedConfig())
			ctc := utc.GetCommonTlsContext()
			vc := ctc.GetValidationContext()
			if utc.GetSni() != w.sni || !slices.Equal(ctc.GetAlpnProtocols(), w.alpn) || vc.GetTrustedCa().GetFilename() != w.ca ||
				ctc.GetTlsParams().GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 {
				t.Errorf("tls = %v", utc)
			}
			if san := vc.GetMatchTypedSubjectAltNames(); len(san) != 1 || san[0].GetSanType() != w.sanType || san[0].GetMatcher().GetExact() != w.san {
				t.Errorf("subject alt names = %v", san)
			}
			if c.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != MaxUpstreamRequests ||
				c.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != OutlierConsecutive5xx {
				t.Errorf("circuit breakers %v outlier detection %v", c.GetCircuitBreakers(), c.GetOutlierDetection())
			}
			cla := c.GetLoadAssignment()
			if c.GetType() == clusterv3.Cluster_EDS {
				cla = resource[*endpointv3.ClusterLoadAssignment](t, snap, resourcev3.EndpointType, c.GetName())
			}
			if p := cla.GetEndpoints()[0].GetPriority(); p != w.priority {
				t.Errorf("priority = %d, want %d", p, w.priority)
			}
		})
	}
}

// TestLocalReplies: every mapper renders the OpenAI error shape, and none
// matches on a status alone that extproc itself answers with: those would
// rewrite extproc's own errors (Envoy maps immediate responses too).
func TestLocalReplies(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	// The statuses extproc's immediate responses use (extproc/, apierror/).
	extprocStatuses := []uint32{400, 401, 403, 404, 405, 429, 502, 503}
	replies := LocalReplies(cfg)
	lrc := LocalReplyConfig(cfg)
	if len(lrc.GetMappers()) != len(replies) {
		t.Fatalf("%d mappers for %d replies", len(lrc.GetMappers()), len(replies))
	}
	for i, m := range lrc.GetMappers() {
		r := replies[i]
		var body struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal([]byte(m.GetBody().GetInlineString()), &body); err != nil {
			t.Fatalf("mapper %d body: %v", i, err)
		}
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := body.Error[k]; !ok {
				t.Errorf("mapper %d (%s): body lacks %q", i, r.Error.Code, k)
			}
		}
		if f := m.GetBodyFormatOverride(); f.GetTextFormatSource().GetInlineString() != "%LOCAL_REPLY_BODY%" || f.GetContentType() != "application/json" {
			t.Errorf("mapper %d format = %v", i, f)
		}
		if len(r.Flags) == 0 && slices.Contains(extprocStatuses, r.Status) {
			t.Errorf("mapper %d (%s) matches status %d alone, which extproc sends itself", i, r.Error.Code, r.Status)
		}
		if len(r.Flags) > 0 && r.Status != 0 {
			if m.GetFilter().GetAndFilter() == nil {
				t.Errorf("mapper %d: flags and status not combined with and_filter: %v", i, m.GetFilter())
			}
		}
		if len(r.Flags) > 0 && r.Status == 0 && !slices.Equal(m.GetFilter().GetResponseFlagFilter().GetFlags(), r.Flags) {
			t.Errorf("mapper %d filter = %v", i, m.GetFilter())
		}
		if err := Validate(&accesslogv3.AccessLogFilter{FilterSpecifier: m.GetFilter().GetFilterSpecifier()}); err != nil {
			t.Errorf("mapper %d filter: %v", i, err)
		}
	}
	var tooLarge string
	for _, r := range replies {
		if r.Status == 413 {
			tooLarge = r.Error.Message
		}
	}
	if !strings.Contains(tooLarge, "33554432") {
		t.Errorf("413 message %q does not state the limit", tooLarge)
	}
}
