package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

// updateConformance rewrites docs/conformance.md from the run instead of
// comparing the committed file with it.
var updateConformance = flag.Bool("update", false, "rewrite docs/conformance.md from TestConformanceMatrix's run")

// conformanceDoc is the generated matrix, relative to this package.
const conformanceDoc = "../docs/conformance.md"

// matrixVendor is one column: a vendor of the default configuration and the
// demo models routed to it.
type matrixVendor struct {
	name     string // the column heading
	provider string // the default configuration's provider serving it
	kind     string // that provider's wire format
	chat     string // its chat model
	embed    string // its embeddings model; "" when the default configuration has none
}

// matrixVendors are the columns, in the order the matrix shows them.
var matrixVendors = []matrixVendor{
	{name: "OpenAI", provider: "fake-openai", kind: fake.KindOpenAI, chat: "demo/chat", embed: "demo/embed"},
	{name: "Anthropic", provider: "fake-anthropic", kind: fake.KindAnthropic, chat: "demo/chat-anthropic"},
	{name: "Gemini", provider: "fake-gemini", kind: fake.KindGemini, chat: "demo/chat-gemini"},
}

// matrixCase is one row: a feature driven through the official SDK against
// one vendor. run returns nil only when the behaviour was checked (content,
// not only the absence of an error).
type matrixCase struct {
	feature string
	// checks says what a passing cell showed, for the generated document.
	checks string
	run    func(t *testing.T, c openai.Client, v matrixVendor) error
	// unsupported are the documented exceptions: vendor name -> why the
	// feature is not offered there. Such a cell must fail, and fail cleanly
	// (an OpenAI-shaped 4xx); a cell that starts passing fails the test until
	// its exception is removed, so the document never understates either.
	unsupported map[string]string
}

// errNotBuilt is what a row of a feature still on another branch answers.
var errNotBuilt = errors.New("not built yet")

// errHostLimited is what a case answers when this host cannot run what it
// checks (the code interpreter's sandbox): the cell skips, or fails in CI,
// and the document is not compared.
var errHostLimited = errors.New("this host cannot run the check")

// matrixCases are the rows, in the order the matrix shows them. Adding a
// feature is adding an entry (cases in conformance_cases_test.go).
var matrixCases = []matrixCase{
	{feature: "chat", run: caseChat,
		checks: "`chat.completions.create`: the demo model's answer (`Echo: <prompt>`), `finish_reason` stop, usage counted"},
	{feature: "streaming chat", run: caseStreamingChat,
		checks: "streamed chunks accumulated by the SDK: the whole answer, `finish_reason` stop, one usage chunk with `include_usage`"},
	{feature: "tool calls (chat)", run: caseChatTools,
		checks: "a `get_weather` call with JSON arguments, then the answer built from the tool result sent back"},
	{feature: "structured outputs: json_schema (chat)", run: caseJSONSchema,
		checks: "`response_format` `json_schema` (strict, with `$defs`, enums, nullable members): the content validates against the schema"},
	{feature: "structured outputs: json_object (chat)", run: caseJSONObject,
		checks: "`response_format` `json_object`: the content is a JSON object"},
	{feature: "structured outputs: text.format (Responses)", run: caseTextFormat,
		checks: "`text.format` `json_schema` on `responses.create`: `output_text` validates against the schema"},
	{feature: "embeddings", run: caseEmbeddings,
		checks: "two inputs give two vectors in input order, different for different texts, usage counted",
		unsupported: map[string]string{
			"Anthropic": "Anthropic's API has no embeddings endpoint; the chat model is refused with a 4xx",
			"Gemini":    "the default configuration routes no Gemini embedding model (the gateway translates Gemini embeddings: e2e TestEmbeddings); the chat model is refused with a 4xx",
		}},
	{feature: "Responses", run: caseResponses,
		checks: "`responses.create` with `instructions`: status completed, the answer in `output_text`, usage counted; retrievable by id"},
	{feature: "Responses streaming", run: caseResponsesStreaming,
		checks: "events from `response.created` to `response.completed`; the text deltas make the completed response's `output_text`"},
	{feature: "Responses previous_response_id", run: caseResponsesChain,
		checks: "a second turn on `previous_response_id` answers its own input and carries the first turn (more input tokens)"},
	{feature: "Responses function tools", run: caseResponsesFunctionTools,
		checks: "a `function_call` item, then the answer built from the `function_call_output` sent back on the chain"},
	{feature: "Responses web_search", run: caseResponsesWebSearch,
		checks: "a completed `web_search_call` (the gateway searches the fake Brave API) and a `url_citation` in the answer"},
	{feature: "Responses file_search", run: caseResponsesFileSearch,
		checks: "a vector store of an uploaded file: a completed `file_search_call`, a `file_citation` of the file and its text in the answer"},
	{feature: "Responses code_interpreter", run: caseResponsesCodeInterpreter,
		checks: "the model's code runs in the sandbox: a completed `code_interpreter_call` whose logs (a NameError) reach the answer"},
	{feature: "Conversations", run: caseConversations,
		checks: "`conversations.create`, two `responses.create` turns on `conversation`, its items listed in order, metadata updated, deleted"},
	{feature: "background responses", run: caseBackground,
		checks: "`background: true` answers queued or in_progress at once; polling `responses.retrieve` reaches completed with the answer"},
	{feature: "files", run: caseFiles,
		checks: "upload, list, retrieve, content (byte-exact), delete; gone afterwards (the gateway's own store: no model involved)"},
	{feature: "batches", run: caseBatches,
		checks: "a two-line `/v1/chat/completions` batch on the vendor's model reaches completed; each output line has its `custom_id`, status 200 and the answer"},
	{feature: "vector stores", run: caseVectorStores,
		checks: "create, `file_batches` `UploadAndPoll` of two files (completed, counted), search finds the right file's text (embedded with `demo/embed`)"},
}

// cellResult is the outcome of one case on one vendor.
type cellResult struct {
	err  error
	note string // the documented exception, when one applies
}

// TestConformanceMatrix drives every feature against every demo vendor of
// the default configuration through one in-process stack, and checks that
// docs/conformance.md is what the run produced (-update rewrites it).
func TestConformanceMatrix(t *testing.T) {
	s, fakes := newDefaultConfigStack(t)
	c := s.client()

	var mu sync.Mutex
	results := map[[2]string]cellResult{}
	var limited []string // cells this host could not check
	// The group returns once every parallel cell has.
	t.Run("cells", func(t *testing.T) {
		for _, mc := range matrixCases {
			for _, v := range matrixVendors {
				t.Run(mc.feature+"/"+v.name, func(t *testing.T) {
					t.Parallel()
					err := mc.run(t, c, v)
					res := cellResult{err: err}
					reason, excepted := mc.unsupported[v.name]
					switch {
					case errors.Is(err, errHostLimited):
						mu.Lock()
						limited = append(limited, mc.feature+" on "+v.name)
						mu.Unlock()
						testserver.Unavailable(t, "the code interpreter's sandbox", "this cell is not checked and docs/conformance.md is not compared", err)
					case errors.Is(err, errNotBuilt):
						t.Logf("%s: not built yet", mc.feature)
					case excepted && err == nil:
						t.Errorf("%s on %s passes but is listed as not supported (%s): remove the exception", mc.feature, v.name, reason)
					case excepted:
						// A documented exception still refuses cleanly.
						var e *openai.Error
						if !errors.As(err, &e) || e.StatusCode < 400 || e.StatusCode >= 500 || e.Message == "" {
							t.Errorf("%s on %s is not supported (%s) but failed without a clear 4xx: %v", mc.feature, v.name, reason, err)
						} else {
							t.Logf("%s on %s: not supported (%s): %d %s: %s", mc.feature, v.name, reason, e.StatusCode, e.Code, e.Message)
						}
						res.note = reason
					case err != nil:
						t.Errorf("%s on %s: %v", mc.feature, v.name, err)
					}
					mu.Lock()
					results[[2]string{mc.feature, v.name}] = res
					mu.Unlock()
				})
			}
		}
	})

	// Each column is its vendor: that vendor's fake, in its own wire
	// format, answered the column's chat.
	for _, v := range matrixVendors {
		reached := false
		for _, r := range fakes[v.kind].all() {
			reached = reached || bytes.Contains(r.body, []byte(`"hello `+v.name+`"`))
		}
		if !reached {
			t.Errorf("the %s column's chat never reached the %s fake", v.name, v.kind)
		}
	}

	if len(limited) > 0 {
		slices.Sort(limited)
		if *updateConformance {
			t.Fatalf("not rewriting %s: this host could not check %s", conformanceDoc, strings.Join(limited, ", "))
		}
		t.Skipf("SKIP: %s not compared: this host could not check %s", conformanceDoc, strings.Join(limited, ", "))
	}
	got := renderConformance(results)
	if *updateConformance {
		if err := os.WriteFile(conformanceDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", conformanceDoc)
		return
	}
	want, err := os.ReadFile(conformanceDoc)
	if err != nil {
		t.Fatalf("%v: generate it with: go test ./e2e -run TestConformanceMatrix -update", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/conformance.md is not what this run produced; regenerate it with\n"+
			"  go test ./e2e -run TestConformanceMatrix -update\nand commit it. Differences (- committed, + this run):\n%s",
			lineDiff(string(want), string(got)))
	}
}

// renderConformance writes the matrix: rows and columns in table order,
// no times or durations, so an unchanged outcome is an unchanged file.
func renderConformance(results map[[2]string]cellResult) []byte {
	var b strings.Builder
	b.WriteString("# Conformance: every feature on every demo vendor\n\n")
	b.WriteString("<!-- Generated by TestConformanceMatrix (e2e/conformance_matrix_test.go); do not edit. -->\n")
	b.WriteString("<!-- Regenerate: go test ./e2e -run TestConformanceMatrix -update -->\n\n")
	b.WriteString("Each cell is one feature driven through the official OpenAI Go SDK (openai-go) against one vendor's demo\n" +
		"model of the default configuration (`internal/config/default.yaml`: the fake vendors of `make run`, each\n" +
		"speaking its vendor's wire format), through the whole in-process gateway: data plane, ext_proc (keys,\n" +
		"routing, translation), rate limits and the backends. `make test` runs it and fails when a cell fails or\n" +
		"when this file differs from what the run produced, so the committed matrix is the tested one.\n\n")
	b.WriteString("The helpers that only the npm SDKs have (the `openai` package's `chat.completions.parse` and\n" +
		"`responses.parse` with zod, `runTools`, `fileBatches.uploadAndPoll`; the Vercel AI SDK's `generateObject`\n" +
		"and `streamText`; LangChain's `withStructuredOutput`; the Agents SDK's `outputType` and tools) are driven\n" +
		"on the same three models by e2e `TestNPMSDKs` (the Node project in `e2e/npm/`; see the README).\n\n")
	b.WriteString("| feature |")
	for _, v := range matrixVendors {
		fmt.Fprintf(&b, " %s (`%s`) |", v.name, v.chat)
	}
	b.WriteString("\n|---|")
	for range matrixVendors {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	var notes []string
	for _, mc := range matrixCases {
		fmt.Fprintf(&b, "| %s |", mc.feature)
		for _, v := range matrixVendors {
			r, ok := results[[2]string{mc.feature, v.name}]
			switch {
			case !ok:
				b.WriteString(" not run |")
			case errors.Is(r.err, errNotBuilt):
				b.WriteString(" not built yet |")
			case r.note != "":
				notes = append(notes, fmt.Sprintf("%s on %s: %s.", mc.feature, v.name, r.note))
				fmt.Fprintf(&b, " not supported [%d] |", len(notes))
			case r.err != nil:
				b.WriteString(" **FAIL** |")
			default:
				b.WriteString(" pass |")
			}
		}
		b.WriteString("\n")
	}
	if len(notes) > 0 {
		b.WriteString("\nNot supported:\n\n")
		for i, n := range notes {
			fmt.Fprintf(&b, "%d. %s\n", i+1, n)
		}
	}
	b.WriteString("\n## What a passing cell checked\n\n")
	for _, mc := range matrixCases {
		fmt.Fprintf(&b, "- **%s**: %s.\n", mc.feature, mc.checks)
	}
	return []byte(b.String())
}

// lineDiff lists the lines only one side has, in order; enough to see which
// cells changed.
func lineDiff(want, got string) string {
	in := func(lines []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range lines {
			m[l] = true
		}
		return m
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	wm, gm := in(wl), in(gl)
	var b strings.Builder
	for _, l := range wl {
		if !gm[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range gl {
		if !wm[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// newDefaultConfigStack starts a gateway on the embedded default
// configuration, its demo vendors on free loopback ports instead of the
// fixed ones `make run` uses, with an enterprise key no cell's traffic
// limits. The fakes record what reaches them, by kind.
func newDefaultConfigStack(t *testing.T) (*stack, map[string]*recorder) {
	t.Helper()
	base, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	// The columns are the default configuration's: fail, rather than test
	// something else, when it changes.
	for _, v := range matrixVendors {
		for _, id := range []string{v.chat, v.embed} {
			if id == "" {
				continue
			}
			m, ok := base.Model(id)
			if !ok || len(m.Providers) == 0 || m.Providers[0].Provider != v.provider {
				t.Fatalf("the default configuration no longer serves %s from %s: update matrixVendors", id, v.provider)
			}
		}
		if p, ok := base.Provider(v.provider); !ok || p.Kind != v.kind {
			t.Fatalf("the default configuration's provider %s is not of kind %s: update matrixVendors", v.provider, v.kind)
		}
	}

	// Each demo upstream gets a free port, bound now and served by the
	// gateway's demo-upstream hook as `switchyard run` does.
	yaml := string(config.DefaultYAML())
	listeners := map[string]net.Listener{}
	fakes := map[string]*recorder{}
	for _, d := range base.DemoUpstreams {
		fakes[d.Kind] = &recorder{}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		yaml = strings.ReplaceAll(yaml, d.Listen, ln.Addr().String())
		listeners[ln.Addr().String()] = ln
	}
	// Fixed credentials, restored after the test (the gateway would set
	// random ones for the process otherwise).
	for _, p := range base.Providers {
		t.Setenv(p.APIKeyEnv, "conformance-"+p.Name+"-"+strings.Repeat("k", 16))
	}
	if ws := base.Tools.WebSearch; ws != nil {
		t.Setenv(ws.APIKeyEnv, "conformance-search-"+strings.Repeat("k", 16))
	}
	cfg, err := config.Parse("default.yaml (free ports)", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(_ context.Context, listen, kind, apiKey string) (io.Closer, error) {
		ln := listeners[listen]
		if ln == nil {
			return nil, fmt.Errorf("no listener bound for %s", listen)
		}
		h, err := fake.Handler(kind, fake.Options{APIKey: apiKey})
		if err != nil {
			return nil, err
		}
		rec := fakes[kind]
		rec.next = h
		srv := &http.Server{Handler: rec, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		return srv, nil
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gw, err := gateway.Start(ctx, gateway.Options{
		DemoUpstream:   serve,
		Config:         cfg,
		DataDir:        t.TempDir(),
		Logger:         slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		ListenOverride: "127.0.0.1:0",
		RateLimitClock: fixedClock{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	key, _, err := gw.Keys.Issue(ctx, keys.Spec{Name: "conformance", Tier: "enterprise", RPM: 1_000_000, TPM: 1_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The warnings and errors only: the access log of every cell is
		// too long to read.
		if !t.Failed() {
			return
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
				t.Log(l)
			}
		}
	})
	return &stack{gw: gw, key: key, logs: logs}, fakes
}
