package dataplane

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// tlsResources returns a TLS transport socket naming an SDS secret, and the
// secret with the certificate files.
func tlsResources(t *testing.T, c testCert) (*corev3.TransportSocket, *tlsv3.Secret) {
	certFile, keyFile := c.files(t)
	secret := &tlsv3.Secret{Name: "listener_public", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: certFile}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: keyFile}},
	}}}
	dtc := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: secret.Name}},
		TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
		AlpnProtocols:                  []string{"h2", "http/1.1"},
	}}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, dtc)}}, secret
}

func TestPlainHTTPOnlyOnLoopback(t *testing.T) {
	cert := newTestCert(t, "localhost")
	ts, secret := tlsResources(t, cert)
	tests := []struct {
		name     string
		host     string
		insecure bool
		tls      bool
		wantErr  bool
	}{
		{"loopback without TLS", "127.0.0.1", false, false, false},
		{"non-loopback without TLS is refused", "0.0.0.0", false, false, true},
		{"non-loopback without TLS when insecure", "0.0.0.0", true, false, false},
		{"non-loopback with TLS", "0.0.0.0", false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.opts.Insecure = tc.insecure
			e.dp = New(e.opts)
			t.Cleanup(func() { _ = e.dp.Close() })
			o := resOpts{address: sockAddr(tc.host, 0)}
			if tc.tls {
				o.tls, o.secrets = ts, []*tlsv3.Secret{secret}
			}
			err := e.dp.Apply(context.Background(), buildResources(t, e.up.URL, o))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Apply error = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && e.dp.Addr(testListener) != nil {
				t.Error("a refused listener is listening")
			}
		})
	}
}

func TestTLSListener(t *testing.T) {
	e := newEnv(t)
	cert := newTestCert(t, "localhost")
	ts, secret := tlsResources(t, cert)
	e.apply(resOpts{tls: ts, secrets: []*tlsv3.Secret{secret}})
	e.proc.setScript(routeToModel(testModel))
	addr := e.dp.Addr(testListener).String()
	tests := []struct {
		name      string
		protocols func(*http.Protocols)
		wantProto int
	}{
		{"h2 by ALPN", func(p *http.Protocols) { p.SetHTTP2(true) }, 2},
		{"http/1.1", func(p *http.Protocols) { p.SetHTTP1(true) }, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.pool, ServerName: "localhost"}, Protocols: new(http.Protocols)}
			tc.protocols(tr.Protocols)
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Post("https://"+addr+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || resp.ProtoMajor != tc.wantProto {
				t.Fatalf("got %d over HTTP/%d: %s", resp.StatusCode, resp.ProtoMajor, body)
			}
		})
	}
	// The processor sees the https scheme.
	if got, _ := headerValue(e.proc.all()[0].GetRequestHeaders().GetHeaders(), ":scheme"); got != "https" {
		t.Errorf(":scheme = %q", got)
	}
	// TLS 1.1 is refused.
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: cert.pool, ServerName: "localhost", MaxVersion: tls.VersionTLS11})
	if err == nil {
		conn.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

func TestH2C(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(routeToModel(testModel))
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(e.url("/v1/chat/completions"), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || string(body) != `{"ok":true}` {
		t.Fatalf("got %d over HTTP/%d: %s", resp.StatusCode, resp.ProtoMajor, body)
	}
	if line := e.logs.access(t, 1); line["protocol"] != "HTTP/2.0" {
		t.Errorf("access log protocol %v", line["protocol"])
	}
	// A bodiless HTTP/2 request ends the stream with its headers.
	e.proc.reset()
	resp, err = (&http.Client{Transport: tr}).Get(e.url("/v1/models"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if msgs := e.proc.all(); len(msgs) == 0 || !msgs[0].GetRequestHeaders().GetEndOfStream() {
		t.Errorf("h2 GET: request_headers end_of_stream false")
	}
}

func TestApplyRejectsAndKeepsConfig(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(routeToModel(testModel))
	addr := e.dp.Addr(testListener)
	check := func(t *testing.T) {
		t.Helper()
		if got := e.dp.Addr(testListener); got.String() != addr.String() {
			t.Fatalf("listener moved to %v", got)
		}
		if resp, body := e.post("/v1/chat/completions", "{}"); resp.StatusCode != 200 {
			t.Fatalf("old configuration not serving: %d %s", resp.StatusCode, body)
		}
	}
	check(t)

	hcmOf := func(r Resources) *hcmv3.HttpConnectionManager {
		h := &hcmv3.HttpConnectionManager{}
		if err := r.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	setHCM := func(r Resources, h *hcmv3.HttpConnectionManager) {
		r.Listeners[0].FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, h)}
	}
	tests := []struct {
		name   string
		break_ func(r *Resources)
		want   string
	}{
		{"route to a missing cluster", func(r *Resources) {
			r.Routes[0].VirtualHosts[0].Routes[0] = modelRoute(testModel, "provider_missing")
		}, `cluster "provider_missing"`},
		{"missing route configuration", func(r *Resources) { r.Routes = nil }, `route config "switchyard_routes"`},
		{"missing endpoint assignment", func(r *Resources) { r.Endpoints = nil }, `endpoints "provider_a"`},
		{"missing secret", func(r *Resources) {
			ts, _ := tlsResources(t, newTestCert(t, "localhost"))
			r.Listeners[0].FilterChains[0].TransportSocket = ts
		}, `secret "listener_public"`},
		{"missing ext_proc cluster", func(r *Resources) {
			ep := defaultExtProc()
			ep.GrpcService.GetEnvoyGrpc().ClusterName = "nope"
			h := hcmOf(*r)
			h.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ep)}
			setHCM(*r, h)
		}, `cluster "nope"`},
		{"router not last", func(r *Resources) {
			h := hcmOf(*r)
			h.HttpFilters[0], h.HttpFilters[1] = h.HttpFilters[1], h.HttpFilters[0]
			setHCM(*r, h)
		}, "router"},
		{"unsupported filter", func(r *Resources) {
			h := hcmOf(*r)
			h.HttpFilters = append([]*hcmv3.HttpFilter{{Name: "envoy.filters.http.lua",
				ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &structpb.Struct{})}}}, h.HttpFilters...)
			setHCM(*r, h)
		}, "not supported"},
		{"undecodable filter", func(r *Resources) {
			h := hcmOf(*r)
			h.HttpFilters[0].GetTypedConfig().Value = []byte{0xff, 0xff}
			setHCM(*r, h)
		}, "ext_proc"},
		{"invalid resource", func(r *Resources) {
			r.Routes[0].VirtualHosts[0].Routes[1].GetDirectResponse().Status = 42
		}, "Status"},
		{"port in use", func(r *Resources) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			r.Listeners[0].Address = sockAddr("127.0.0.1", l.Addr().(*net.TCPAddr).Port)
		}, "address already in use"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := buildResources(t, e.up.URL, resOpts{})
			tc.break_(&r)
			err := e.dp.Apply(context.Background(), r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply error = %v, want one mentioning %q", err, tc.want)
			}
			check(t)
		})
	}
}

func TestListenerLifecycle(t *testing.T) {
	e := newEnv(t)
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	p1, p2 := free(), free()
	e.apply(resOpts{address: sockAddr("127.0.0.1", p1)})
	if got := e.dp.Addr(testListener).(*net.TCPAddr).Port; got != p1 {
		t.Fatalf("port %d, want %d", got, p1)
	}
	// A new route table applies to the running listener without a restart.
	e.apply(resOpts{address: sockAddr("127.0.0.1", p1), routes: defaultRoutes(t, filesRoute(t, nil))})
	if got := e.dp.Addr(testListener).(*net.TCPAddr).Port; got != p1 {
		t.Fatalf("listener restarted on a route change")
	}
	// A new address restarts it.
	e.apply(resOpts{address: sockAddr("127.0.0.1", p2)})
	if got := e.dp.Addr(testListener).(*net.TCPAddr).Port; got != p2 {
		t.Fatalf("port %d, want %d", got, p2)
	}
	waitClosed(t, p1)
	if resp, _ := e.post("/v1/chat/completions", "{}"); resp.StatusCode != 404 {
		t.Errorf("new listener status %d", resp.StatusCode)
	}
	// Removing it stops it.
	r := buildResources(t, e.up.URL, resOpts{})
	r.Listeners = nil
	if err := e.dp.Apply(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if e.dp.Addr(testListener) != nil {
		t.Error("a removed listener still has an address")
	}
	waitClosed(t, p2)
}

func waitClosed(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("port %d still accepts connections", port)
}

func TestCertificateRotationWithoutRestart(t *testing.T) {
	e := newEnv(t)
	c1, c2 := newTestCert(t, "localhost"), newTestCert(t, "localhost")
	ts, s1 := tlsResources(t, c1)
	e.apply(resOpts{tls: ts, secrets: []*tlsv3.Secret{s1}})
	addr := e.dp.Addr(testListener).String()
	_, s2 := tlsResources(t, c2)
	e.apply(resOpts{tls: ts, secrets: []*tlsv3.Secret{s2}})
	if e.dp.Addr(testListener).String() != addr {
		t.Fatal("the listener restarted for a certificate change")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: c2.pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("the new certificate is not served: %v", err)
	}
	conn.Close()
}

func TestInFlightRequestKeepsItsConfig(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	e.up.handler = sseUpstream(release)
	e.apply(resOpts{})
	e.proc.setScript(routeToModel(testModel))
	req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Replace the configuration: the model route and its cluster go away.
	r := buildResources(t, e.up.URL, resOpts{})
	r.Routes[0].VirtualHosts[0].Routes = r.Routes[0].VirtualHosts[0].Routes[1:]
	r.Clusters, r.Endpoints = []*clusterv3.Cluster{}, []*endpointv3.ClusterLoadAssignment{}
	if err := e.dp.Apply(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	close(release)
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "data: one\n\ndata: two\n\n" {
		t.Fatalf("in-flight request: %q, %v", body, err)
	}
	if resp, _ := e.post("/v1/chat/completions", "{}"); resp.StatusCode != 404 {
		t.Errorf("new request status %d, want 404 under the new configuration", resp.StatusCode)
	}
}
