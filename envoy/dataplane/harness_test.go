package dataplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// ---- scripted ext_proc server ----

// procScript answers one message. Returning (nil, nil) closes the stream
// cleanly; an error fails it with that status.
type procScript func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)

type fakeProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	mu       sync.Mutex
	script   procScript
	received []*extprocv3.ProcessingRequest
	streams  int
}

func (f *fakeProc) setScript(s procScript) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = s
}

// record keeps req among those received and returns the script that
// answers it.
func (f *fakeProc) record(req *extprocv3.ProcessingRequest) procScript {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.received = append(f.received, req)
	if f.script == nil {
		return continueAll
	}
	return f.script
}

func (f *fakeProc) Process(ps extprocv3.ExternalProcessor_ProcessServer) error {
	f.mu.Lock()
	f.streams++
	f.mu.Unlock()
	for {
		req, err := ps.Recv()
		if err != nil {
			return nil
		}
		resp, err := f.record(req)(req)
		if err != nil {
			return err
		}
		if resp == nil {
			return nil
		}
		if err := ps.Send(resp); err != nil {
			return nil
		}
	}
}

// messages returns the kinds of the messages received so far, in order.
func (f *fakeProc) messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.received {
		out = append(out, kindName(r))
	}
	return out
}

func (f *fakeProc) all() []*extprocv3.ProcessingRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*extprocv3.ProcessingRequest(nil), f.received...)
}

func (f *fakeProc) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.received = nil
	f.streams = 0
}

func kindName(r *extprocv3.ProcessingRequest) string {
	switch r.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	}
	return "other"
}

// reply builds the reply of the matching kind carrying common.
func reply(req *extprocv3.ProcessingRequest, common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: common}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: common}}}
	}
	return nil
}

func continueAll(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	return reply(req, &extprocv3.CommonResponse{}), nil
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

func headerValue(hm *corev3.HeaderMap, key string) (string, bool) {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() == key {
			return string(h.GetRawValue()), true
		}
	}
	return "", false
}

// ---- upstream ----

type seenRequest struct {
	method, path, host string
	header             http.Header
	body               []byte
	proto              int
	tlsServerName      string
}

type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	seen    []seenRequest
	handler http.HandlerFunc
}

func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	u := &upstream{handler: h}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sr := seenRequest{method: r.Method, path: r.URL.RequestURI(), host: r.Host, header: r.Header.Clone(), body: body, proto: r.ProtoMajor}
	if r.TLS != nil {
		sr.tlsServerName = r.TLS.ServerName
	}
	u.mu.Lock()
	u.seen = append(u.seen, sr)
	h := u.handler
	u.mu.Unlock()
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
		return
	}
	h(w, r)
}

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *upstream) last(t *testing.T) seenRequest {
	t.Helper()
	s := u.requests()
	if len(s) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return s[len(s)-1]
}

// ---- log capture ----

type logCapture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCapture) WithGroup(string) slog.Handler      { return h }

// access waits for the n-th access log line and returns its fields.
func (h *logCapture) access(t *testing.T, n int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		var lines []map[string]any
		for _, r := range h.records {
			if r.Message != "access" {
				continue
			}
			m := map[string]any{}
			r.Attrs(func(a slog.Attr) bool {
				m[a.Key] = a.Value.Any()
				return true
			})
			lines = append(lines, m)
		}
		h.mu.Unlock()
		if len(lines) >= n {
			return lines[n-1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no access log line #%d", n)
	return nil
}

// text renders every record, attributes included, for leak checks.
func (h *logCapture) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.records {
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		b.WriteString("\n")
	}
	return b.String()
}

// ---- resources ----

const (
	testListener = "public"
	testCluster  = "provider_a"
	testModel    = "m1"
)

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func sockAddr(host string, port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

// defaultExtProc is the filter configuration the control plane generates.
func defaultExtProc() *extprocfilterv3.ExternalProcessor {
	return &extprocfilterv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: catalog.ExtProcCluster}}},
		ProcessingMode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode:    extprocfilterv3.ProcessingMode_NONE,
			RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
			ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
		},
		MessageTimeout:    durationpb.New(2 * time.Second),
		AllowModeOverride: true,
		MetadataOptions: &extprocfilterv3.MetadataOptions{ReceivingNamespaces: &extprocfilterv3.MetadataOptions_MetadataNamespaces{
			Untyped: []string{catalog.MetadataNamespace}}},
	}
}

type resOpts struct {
	extProc     *extprocfilterv3.ExternalProcessor // nil: defaultExtProc; noExtProc for none
	noExtProc   bool
	bufferLimit uint32
	address     *corev3.Address
	tls         *corev3.TransportSocket
	routes      *routev3.RouteConfiguration
	clusters    []*clusterv3.Cluster
	endpoints   []*endpointv3.ClusterLoadAssignment
	secrets     []*tlsv3.Secret
}

func buildResources(t testing.TB, up string, o resOpts) Resources {
	t.Helper()
	ep := o.extProc
	if ep == nil {
		ep = defaultExtProc()
	}
	var filters []*hcmv3.HttpFilter
	if !o.noExtProc {
		filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.ext_proc", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ep)}})
	}
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}})
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: testListener,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
			RouteConfigName: catalog.ListenerRouteConfig,
		}},
		StreamIdleTimeout: durationpb.New(time.Minute),
		GenerateRequestId: wrapperspb.Bool(true),
		HttpFilters:       filters,
	}
	addr := o.address
	if addr == nil {
		addr = sockAddr("127.0.0.1", 0)
	}
	limit := o.bufferLimit
	if limit == 0 {
		limit = 1 << 20
	}
	l := &listenerv3.Listener{
		Name:                          testListener,
		Address:                       addr,
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(limit),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)},
			}},
			TransportSocket: o.tls,
		}},
	}
	routes := o.routes
	if routes == nil {
		routes = defaultRoutes(t)
	}
	clusters, endpoints := o.clusters, o.endpoints
	if clusters == nil {
		c, cla := edsCluster(t, testCluster, up)
		clusters, endpoints = []*clusterv3.Cluster{c}, []*endpointv3.ClusterLoadAssignment{cla}
	}
	return Resources{
		Listeners: []*listenerv3.Listener{l},
		Routes:    []*routev3.RouteConfiguration{routes},
		Clusters:  clusters,
		Endpoints: endpoints,
		Secrets:   o.secrets,
	}
}

// modelRoute routes a model to a cluster the way the control plane does.
func modelRoute(model, cluster string) *routev3.Route {
	return &routev3.Route{
		Name: "model:" + model,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"},
			Headers: []*routev3.HeaderMatcher{{
				Name: catalog.RouteHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: model}}},
			}},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
			Timeout:          durationpb.New(0),
			IdleTimeout:      durationpb.New(time.Minute),
		}},
	}
}

func notFoundRoute() *routev3.Route {
	nf := apierror.NotFound("this path")
	return &routev3.Route{
		Name:  "not_found",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: uint32(nf.Status),
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(nf.JSON())}},
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: "content-type", Value: "application/json"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	}
}

func defaultRoutes(t testing.TB, extra ...*routev3.Route) *routev3.RouteConfiguration {
	routes := append(extra, modelRoute(testModel, testCluster), notFoundRoute())
	return &routev3.RouteConfiguration{
		Name:         catalog.ListenerRouteConfig,
		VirtualHosts: []*routev3.VirtualHost{{Name: "switchyard", Domains: []string{"*"}, Routes: routes}},
	}
}

func edsCluster(t testing.TB, name, upstreamURL string) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment) {
	t.Helper()
	host, port := splitURL(t, upstreamURL)
	c := &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
			ServiceName: name,
		},
	}
	return c, assignment(name, endpointAt(host, port, 0))
}

func endpointAt(host string, port int, priority uint32) *endpointv3.LocalityLbEndpoints {
	return &endpointv3.LocalityLbEndpoints{
		Locality: &corev3.Locality{Region: "us"},
		Priority: priority,
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{
			Endpoint: &endpointv3.Endpoint{Address: sockAddr(host, port)}}}},
	}
}

func assignment(name string, eps ...*endpointv3.LocalityLbEndpoints) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: eps}
}

func splitURL(t testing.TB, u string) (string, int) {
	t.Helper()
	hp := strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return h, port
}

// ---- environment ----

type env struct {
	t    *testing.T
	dp   *DataPlane
	proc *fakeProc
	up   *upstream
	logs *logCapture
	opts Options
}

func startProc(t testing.TB) (*fakeProc, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakeProc{}
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, fp)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return fp, lis.Addr().String()
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fp, addr := startProc(t)
	return buildEnv(t, fp, func(o *Options) { o.StaticClusters[catalog.ExtProcCluster] = addr })
}

// buildEnv builds an env whose ext_proc cluster runs fp's scripts,
// reached as setProc arranges (a gRPC server's address, or a local
// processor), with any other options it sets.
func buildEnv(t *testing.T, fp *fakeProc, setProc func(*Options)) *env {
	t.Helper()
	logs := &logCapture{}
	e := &env{
		t:    t,
		proc: fp,
		up:   newUpstream(t, nil),
		logs: logs,
		opts: Options{
			Logger:         slog.New(logs),
			StaticClusters: map[string]string{catalog.XDSCluster: "127.0.0.1:1"},
		},
	}
	setProc(&e.opts)
	e.dp = New(e.opts)
	t.Cleanup(func() { _ = e.dp.Close() })
	return e
}

func (e *env) apply(o resOpts) {
	e.t.Helper()
	if err := e.dp.Apply(context.Background(), buildResources(e.t, e.up.URL, o)); err != nil {
		e.t.Fatalf("Apply: %v", err)
	}
}

func (e *env) url(path string) string {
	return "http://" + e.dp.Addr(testListener).String() + path
}

func (e *env) do(req *http.Request) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read body: %v", err)
	}
	return resp, b
}

func (e *env) post(path, body string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url(path), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test-secret")
	return e.do(req)
}

// routeToModel is the usual extproc script: on the body, set the routing
// header and clear the route cache.
func routeToModel(model string) procScript {
	return func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		if req.GetRequestBody() != nil {
			return reply(req, &extprocv3.CommonResponse{
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(catalog.RouteHeader, model)}},
				ClearRouteCache: true,
			}), nil
		}
		return continueAll(req)
	}
}

// ---- certificates ----

type testCert struct {
	certPEM, keyPEM []byte
	pool            *x509.CertPool
}

func newTestCert(t *testing.T, names ...string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "switchyard test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
		pool:    x509.NewCertPool(),
	}
	c.pool.AppendCertsFromPEM(c.certPEM)
	return c
}

// files writes the certificate and key and returns their paths.
func (c testCert) files(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, c.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, c.keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
