package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// Secrets used by the tests. Keys have the real shape: "sk-sy-" + 43 base62.
const (
	goodKey      = "sk-sy-GOODgoodGOODgoodGOODgoodGOODgoodGOODgood123"
	revokedKey   = "sk-sy-REVOKEDrevokedREVOKEDrevokedREVOKEDrevo123"
	tombKey      = "sk-sy-TOMBSTONEtombstoneTOMBSTONEtombstoneTOM123"
	unknownKey   = "sk-sy-UNKNOWNunknownUNKNOWNunknownUNKNOWNunkn123"
	storeErrKey  = "sk-sy-STOREERRORstoreerrorSTOREERRORstoreerr123"
	panicKey     = "sk-sy-PANICpanicPANICpanicPANICpanicPANICpanic12"
	narrowKey    = "sk-sy-NARROWnarrowNARROWnarrowNARROWnarrowNAR123"
	providerKey  = "sk-provider-SECRET-4f1d2c3b"
	providerEnv  = "TEST_OPENAI_API_KEY"
	secretPrompt = "the secret prompt content"
)

type fakeKeys map[string]keys.Key

func (f fakeKeys) Lookup(_ context.Context, secret string) (keys.Key, error) {
	switch secret {
	case storeErrKey:
		return keys.Key{}, errors.New("keys: lookup: database is locked")
	case panicKey:
		panic("fake key store exploded")
	}
	k, ok := f[secret]
	if !ok {
		return keys.Key{}, keys.ErrNotFound
	}
	return k, nil
}

// LookupOwner finds the active key of a rotation chain, as keys.SQLiteStore does
// (the newest when several are active).
func (f fakeKeys) LookupOwner(_ context.Context, owner string) (keys.Key, error) {
	var found keys.Key
	for _, k := range f {
		if k.LimitID() == owner && !k.Revoked() && (found.ID == "" || k.ID > found.ID) {
			found = k
		}
	}
	if found.ID == "" {
		return keys.Key{}, keys.ErrNotFound
	}
	return found, nil
}

func testKeys() fakeKeys {
	return fakeKeys{
		goodKey: {ID: "key_0123456789abcdef", Prefix: goodKey[:12], Name: "test", Tier: "standard"},
		// A store that returns a revoked key instead of ErrNotFound must
		// still be refused.
		tombKey: {ID: "key_dead", Tier: "free", RevokedAt: time.Unix(1, 0)},
		// A key with a model allow-list.
		narrowKey: {ID: "key_narrow", Tier: "standard", Models: []string{"acme/embed", "acme/fast"}},
	}
}

type recorded struct {
	keyID, model string
	u            Usage
}

type recorder struct {
	mu  sync.Mutex
	got []recorded
}

func (r *recorder) RecordUsage(ctx context.Context, key *keys.Key, model string, u Usage) {
	if ctx.Err() != nil {
		panic("recorder got a cancelled context")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, recorded{key.ID, model, u})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.got...)
}

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testCatalog() *catalog.Catalog {
	return catalog.FromConfig(&config.Config{
		Region: "us",
		Providers: []config.Provider{
			{Name: "openai", Kind: "openai", BaseURL: "https://api.openai.com/v1", APIKeyEnv: providerEnv, Region: "us"},
			{Name: "local", Kind: "openai", BaseURL: "http://127.0.0.1:8091/v1", Region: "us"},
		},
		Models: []config.Model{
			{ID: "openai/gpt-4o", Providers: []config.ModelProvider{
				{Provider: "openai", UpstreamModel: "gpt-4o-2024-08-06"},
				{Provider: "local", UpstreamModel: "fallback"},
			}},
			{ID: "local/llama", Providers: []config.ModelProvider{{Provider: "local", UpstreamModel: "llama-3.1-8b"}}},
		},
	})
}

func testEnv(name string) string {
	if name == providerEnv {
		return providerKey
	}
	return ""
}

func newTestServer(t testing.TB, withCatalog bool) (*Server, *recorder, *syncBuffer) {
	t.Helper()
	rec := &recorder{}
	logs := &syncBuffer{}
	s := New(Options{
		Keys:   testKeys(),
		Usage:  rec,
		Getenv: testEnv,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if withCatalog {
		if err := s.SetCatalog(testCatalog()); err != nil {
			t.Fatal(err)
		}
	}
	return s, rec, logs
}

// harness is a Server behind a real gRPC listener and a client to drive it
// as Envoy does.
type harness struct {
	srv    *Server
	rec    *recorder
	logs   *syncBuffer
	client extprocv3.ExternalProcessorClient
}

func newHarness(t *testing.T, withCatalog bool) *harness {
	t.Helper()
	srv, rec, logs := newTestServer(t, withCatalog)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &harness{srv: srv, rec: rec, logs: logs, client: extprocv3.NewExternalProcessorClient(conn)}
}

// envoy is one Process stream, i.e. one HTTP request.
type envoy struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
}

func (h *harness) open(t *testing.T) *envoy {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.CloseSend() })
	return &envoy{t: t, stream: s}
}

// do sends one message and returns the reply.
func (e *envoy) do(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	e.t.Helper()
	resp, err := e.try(req)
	if err != nil {
		e.t.Fatalf("Process: %v", err)
	}
	return resp
}

func (e *envoy) try(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	if err := e.stream.Send(req); err != nil {
		return nil, err
	}
	resp, err := e.stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, io.ErrUnexpectedEOF
	}
	return resp, err
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func reqHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}}}
}

// chatHeaders are the request headers of POST /v1/chat/completions.
func chatHeaders(key string, extra ...string) *extprocv3.ProcessingRequest {
	kv := []string{":method", "POST", ":path", chatPath, ":authority", "gateway.local", ":scheme", "https",
		"content-type", "application/json", "x-request-id", "req-test", "accept-encoding", "gzip, deflate"}
	if key != "" {
		kv = append(kv, "authorization", "Bearer "+key)
	}
	return reqHeaders(false, append(kv, extra...)...)
}

func reqBody(body string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}}
}

func respHeaders(status, ctype string, extra ...string) *extprocv3.ProcessingRequest {
	kv := append([]string{":status", status, "content-type", ctype}, extra...)
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)}}}
}

func respBody(body string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos}}}
}

// apiError is the OpenAI error body.
type apiError struct {
	Error struct {
		Message *string `json:"message"`
		Type    *string `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// wantImmediate checks that resp is an immediate OpenAI error reply.
func wantImmediate(t *testing.T, resp *extprocv3.ProcessingResponse, status int, code, param string) (msg string) {
	t.Helper()
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("want immediate response %d %s, got %v", status, code, resp)
	}
	if got := int(ir.GetStatus().GetCode()); got != status {
		t.Errorf("status = %d, want %d", got, status)
	}
	if ct := setHeaders(ir.GetHeaders())["content-type"]; ct != "application/json" {
		t.Errorf("content-type = %q, want application/json", ct)
	}
	raw := map[string]map[string]any{}
	if err := json.Unmarshal(ir.GetBody(), &raw); err != nil {
		t.Fatalf("body %q: %v", ir.GetBody(), err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Errorf("error body lacks %q: %s", k, ir.GetBody())
		}
	}
	var e apiError
	_ = json.Unmarshal(ir.GetBody(), &e)
	if got := deref(e.Error.Code); got != code {
		t.Errorf("code = %q, want %q (%s)", got, code, ir.GetBody())
	}
	if got := deref(e.Error.Param); got != param {
		t.Errorf("param = %q, want %q (%s)", got, param, ir.GetBody())
	}
	if deref(e.Error.Message) == "" || deref(e.Error.Type) == "" {
		t.Errorf("empty message or type: %s", ir.GetBody())
	}
	return deref(e.Error.Message)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// setHeaders flattens a header mutation's set_headers.
func setHeaders(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, h := range m.GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

func metaFields(t *testing.T, resp *extprocv3.ProcessingResponse) map[string]any {
	t.Helper()
	ns := resp.GetDynamicMetadata().GetFields()[catalog.MetadataNamespace]
	if ns == nil {
		t.Fatalf("no %q dynamic metadata in %v", catalog.MetadataNamespace, resp)
	}
	return ns.GetStructValue().AsMap()
}

// chatBody is a minimal valid request with extra members appended.
func chatBody(model string, extra ...string) string {
	var b strings.Builder
	b.WriteString(`{"model":`)
	m, _ := json.Marshal(model)
	b.Write(m)
	b.WriteString(`,"messages":[{"role":"user","content":"` + secretPrompt + `"}]`)
	for _, e := range extra {
		b.WriteString(",")
		b.WriteString(e)
	}
	b.WriteString("}")
	return b.String()
}

// prepared is body as the downstream phase sends it on when the first
// choice is an OpenAI-kind provider that serves model as upstream: with the
// upstream model in place of the client's (request.go, route).
func prepared(body, model, upstream string) string {
	return strings.Replace(body, `"model":"`+model+`"`, `"model":"`+upstream+`"`, 1)
}

// waitFor polls cond for up to a second; for effects of a stream ending,
// which the client cannot observe directly.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not met")
}
