package dataplane

import (
	"bufio"
	"context"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

func TestDirectResponseAndNoRoute(t *testing.T) {
	noCatchAll := &routev3.RouteConfiguration{
		Name:         catalog.ListenerRouteConfig,
		VirtualHosts: []*routev3.VirtualHost{{Name: "vh", Domains: []string{"*"}, Routes: []*routev3.Route{modelRoute(testModel, testCluster)}}},
	}
	tests := []struct {
		name     string
		routes   *routev3.RouteConfiguration
		wantBody string
		wantCode string
	}{
		{"direct_response catch-all", nil, string(apierror.NotFound("this path").JSON()), "unknown_url"},
		{"no route at all", noCatchAll, string(apierror.NotFound("/nope").JSON()), "unknown_url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.apply(resOpts{routes: tc.routes, noExtProc: true})
			req, _ := http.NewRequest(http.MethodGet, e.url("/nope?q=1"), nil)
			resp, body := e.do(req)
			if resp.StatusCode != 404 || string(body) != tc.wantBody {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
			if code := apiError(t, resp, body); code != tc.wantCode {
				t.Errorf("code %q", code)
			}
			if len(e.up.requests()) != 0 {
				t.Error("the upstream was called")
			}
		})
	}
}

func TestUpstreamFailures(t *testing.T) {
	// A port nothing listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	tests := []struct {
		name       string
		route      func(*routev3.Route)
		endpoint   func(e *env) *endpointv3.ClusterLoadAssignment
		handler    http.HandlerFunc
		wantStatus int
		wantCode   string
	}{
		{"connect failure gives 503", nil,
			func(*env) *endpointv3.ClusterLoadAssignment {
				return assignment(testCluster, endpointAt("127.0.0.1", closed, 0))
			}, nil, 503, "upstream_connect_error"},
		{"no endpoint gives 503", nil,
			func(*env) *endpointv3.ClusterLoadAssignment { return assignment(testCluster) }, nil, 503, "no_healthy_upstream"},
		{"route timeout gives 504",
			func(r *routev3.Route) { r.GetRoute().Timeout = durationpb.New(100 * time.Millisecond) }, nil,
			func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(3 * time.Second):
				}
			}, 504, "upstream_request_timeout"},
		{"idle timeout gives 504",
			func(r *routev3.Route) { r.GetRoute().IdleTimeout = durationpb.New(100 * time.Millisecond) }, nil,
			func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-time.After(3 * time.Second):
				}
			}, 504, "stream_idle_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.up.handler = tc.handler
			rt := modelRoute(testModel, testCluster)
			rt.Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
			if tc.route != nil {
				tc.route(rt)
			}
			o := resOpts{noExtProc: true, routes: &routev3.RouteConfiguration{Name: catalog.ListenerRouteConfig,
				VirtualHosts: []*routev3.VirtualHost{{Name: "vh", Domains: []string{"*"}, Routes: []*routev3.Route{rt}}}}}
			if tc.endpoint != nil {
				c, _ := edsCluster(t, testCluster, e.up.URL)
				o.clusters, o.endpoints = []*clusterv3.Cluster{c}, []*endpointv3.ClusterLoadAssignment{tc.endpoint(e)}
			}
			e.apply(o)
			resp, body := e.post("/v1/chat/completions", `{}`)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if code := apiError(t, resp, body); code != tc.wantCode {
				t.Errorf("code %q, want %q", code, tc.wantCode)
			}
			if line := e.logs.access(t, 1); line["status"] != int64(tc.wantStatus) || line["response_detail"] != tc.wantCode {
				t.Errorf("access log %v", line)
			}
		})
	}
}

func TestRewritesAndHopByHop(t *testing.T) {
	e := newEnv(t)
	rt := modelRoute(testModel, testCluster)
	rt.Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}}
	rt.GetRoute().PrefixRewrite = "/openai/v1/"
	rt.GetRoute().HostRewriteSpecifier = &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
	c, cla := edsCluster(t, testCluster, e.up.URL)
	cla.Endpoints[0].LbEndpoints[0].GetEndpoint().Hostname = "api.example.com"
	e.apply(resOpts{noExtProc: true, clusters: []*clusterv3.Cluster{c}, endpoints: []*endpointv3.ClusterLoadAssignment{cla},
		routes: &routev3.RouteConfiguration{Name: catalog.ListenerRouteConfig,
			VirtualHosts: []*routev3.VirtualHost{{Name: "vh", Domains: []string{"*"}, Routes: []*routev3.Route{rt}}}}})
	req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions?a=b"), strings.NewReader("{}"))
	req.Header.Set("Connection", "x-private")
	req.Header.Set("X-Private", "1")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	if resp, body := e.do(req); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	up := e.up.last(t)
	if up.path != "/openai/v1/chat/completions?a=b" || up.host != "api.example.com" {
		t.Errorf("upstream path %q host %q", up.path, up.host)
	}
	if up.header.Get("X-Private") != "" || up.header.Get("Keep-Alive") != "" {
		t.Errorf("hop-by-hop headers forwarded: %v", up.header)
	}
	if got := up.header.Get("X-Forwarded-For"); got != "10.0.0.1,127.0.0.1" {
		t.Errorf("x-forwarded-for %q", got)
	}
	if up.header.Get("X-Forwarded-Proto") != "http" {
		t.Errorf("x-forwarded-proto %q", up.header.Get("X-Forwarded-Proto"))
	}
}

func TestUpstreamTLSAndHTTP2(t *testing.T) {
	tests := []struct {
		name      string
		tls       bool
		h2        bool
		wantProto int
	}{
		{"TLS with SNI", true, false, 1},
		{"TLS with HTTP/2", true, true, 2},
		{"h2c", false, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var seen atomic.Value
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				name := ""
				if r.TLS != nil {
					name = r.TLS.ServerName
				}
				seen.Store([2]any{r.ProtoMajor, name})
				_, _ = io.WriteString(w, "upstream")
			}))
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetHTTP1(true)
			if tc.h2 {
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
				srv.EnableHTTP2 = true
			}
			if tc.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()

			c, cla := edsCluster(t, testCluster, srv.URL)
			if tc.tls {
				ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
				utc := &tlsv3.UpstreamTlsContext{Sni: "example.com", CommonTlsContext: &tlsv3.CommonTlsContext{
					ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
						TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: ca}}}}}}
				c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
					ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, utc)}}
			}
			if tc.h2 {
				c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: mustAny(t, &upstreamhttpv3.HttpProtocolOptions{
					UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
						ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})}
			}
			e.apply(resOpts{clusters: []*clusterv3.Cluster{c}, endpoints: []*endpointv3.ClusterLoadAssignment{cla}})
			e.proc.setScript(routeToModel(testModel))
			resp, body := e.post("/v1/chat/completions", `{}`)
			if resp.StatusCode != 200 || string(body) != "upstream" {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
			got := seen.Load().([2]any)
			if got[0] != tc.wantProto {
				t.Errorf("upstream protocol HTTP/%v, want %d", got[0], tc.wantProto)
			}
			if tc.tls && got[1] != "example.com" {
				t.Errorf("upstream SNI %q, want example.com", got[1])
			}
		})
	}
}

func TestUpstreamTLSVerifies(t *testing.T) {
	// Without a trusted CA the upstream certificate must not be trusted.
	e := newEnv(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake is the point
	srv.StartTLS()
	defer srv.Close()
	c, cla := edsCluster(t, testCluster, srv.URL)
	c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &tlsv3.UpstreamTlsContext{Sni: "example.com"})}}
	e.apply(resOpts{clusters: []*clusterv3.Cluster{c}, endpoints: []*endpointv3.ClusterLoadAssignment{cla}})
	e.proc.setScript(routeToModel(testModel))
	resp, body := e.post("/v1/chat/completions", `{}`)
	if resp.StatusCode != 503 || apiError(t, resp, body) != "upstream_connect_error" {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := newEnv(t)
	cancelled := make(chan struct{})
	started := make(chan struct{})
	e.up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(5 * time.Second):
		}
	}
	e.apply(resOpts{})
	e.proc.setScript(routeToModel(testModel))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(3 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
}

func TestPriorityAndRoundRobin(t *testing.T) {
	cla := assignment("c",
		&endpointv3.LocalityLbEndpoints{Priority: 1, LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.0.0.9", corev3.HealthStatus_HEALTHY, 1)}},
		&endpointv3.LocalityLbEndpoints{Priority: 0, LbEndpoints: []*endpointv3.LbEndpoint{
			lbEndpoint("10.0.0.1", corev3.HealthStatus_UNKNOWN, 1),
			lbEndpoint("10.0.0.2", corev3.HealthStatus_HEALTHY, 1),
			lbEndpoint("10.0.0.3", corev3.HealthStatus_UNHEALTHY, 1),
		}},
	)
	c := &cluster{}
	if err := c.addEndpoints(cla, "test"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		got = append(got, c.pick().addr)
	}
	want := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.1:80", "10.0.0.2:80"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("picks %v, want %v (round robin over healthy priority 0)", got, want)
	}

	// Priority 0 without healthy endpoints fails over to priority 1.
	c = &cluster{}
	cla.Endpoints[1].LbEndpoints = cla.Endpoints[1].LbEndpoints[2:]
	if err := c.addEndpoints(cla, "test"); err != nil {
		t.Fatal(err)
	}
	if got := c.pick().addr; got != "10.0.0.9:80" {
		t.Errorf("pick %s, want the priority 1 endpoint", got)
	}

	// Weights.
	c = &cluster{}
	if err := c.addEndpoints(assignment("w", &endpointv3.LocalityLbEndpoints{LbEndpoints: []*endpointv3.LbEndpoint{
		lbEndpoint("10.0.0.1", corev3.HealthStatus_HEALTHY, 3), lbEndpoint("10.0.0.2", corev3.HealthStatus_HEALTHY, 1)}}), "w"); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for range 8 {
		counts[c.pick().addr]++
	}
	if counts["10.0.0.1:80"] != 6 || counts["10.0.0.2:80"] != 2 {
		t.Errorf("weighted picks %v, want 6:2", counts)
	}
}

func lbEndpoint(ip string, health corev3.HealthStatus, weight uint32) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{
		HealthStatus:        health,
		LoadBalancingWeight: wrapperspb.UInt32(weight),
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: sockAddr(ip, 80)}},
	}
}

func TestStreamedRequestBody(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		switch {
		case req.GetRequestHeaders() != nil:
			r := reply(req, &extprocv3.CommonResponse{
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(catalog.RouteHeader, testModel)}},
				ClearRouteCache: true,
			})
			r.ModeOverride = &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
			return r, nil
		case req.GetRequestBody() != nil:
			return reply(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_Body{Body: []byte(strings.ToUpper(string(req.GetRequestBody().GetBody())))}}}), nil
		}
		return continueAll(req)
	})
	resp, body := e.post("/v1/chat/completions", `{"a":"b"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	up := e.up.last(t)
	if string(up.body) != `{"A":"B"}` {
		t.Errorf("upstream body %q", up.body)
	}
	if up.header.Get("Content-Length") != "" {
		t.Errorf("content-length %q kept in STREAMED mode", up.header.Get("Content-Length"))
	}
}

func TestStalledRequestBodyGets408(t *testing.T) {
	for _, extProc := range []bool{true, false} {
		name := "buffered by ext_proc"
		if !extProc {
			name = "streamed to the upstream"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			r := buildResources(t, e.up.URL, resOpts{noExtProc: !extProc, routes: defaultRoutes(t, filesRoute(t, nil))})
			h := &hcmv3.HttpConnectionManager{}
			if err := r.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
				t.Fatal(err)
			}
			h.StreamIdleTimeout = durationpb.New(150 * time.Millisecond)
			r.Listeners[0].FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, h)}
			if err := e.dp.Apply(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", e.dp.Addr(testListener).String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Promise 100 bytes, send 2, then stall.
			_, _ = io.WriteString(conn, "POST /v1/files HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\nab")
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d %s, want 408", resp.StatusCode, body)
			}
		})
	}
}
