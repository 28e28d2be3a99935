package responses

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/sandbox"
)

func init() {
	for name, schema := range map[string]string{
		"response.code_interpreter_call.in_progress":  "ResponseCodeInterpreterCallInProgressEvent",
		"response.code_interpreter_call_code.delta":   "ResponseCodeInterpreterCallCodeDeltaEvent",
		"response.code_interpreter_call_code.done":    "ResponseCodeInterpreterCallCodeDoneEvent",
		"response.code_interpreter_call.interpreting": "ResponseCodeInterpreterCallInterpretingEvent",
		"response.code_interpreter_call.completed":    "ResponseCodeInterpreterCallCompletedEvent",
	} {
		eventSchemas[name] = schema
	}
}

// nameError is what the fake model's code, "sample", prints.
const nameError = "NameError: name 'sample' is not defined"

// codeEnv is an env whose service runs code in a real sandbox. Without
// root (no namespaces) the sandbox runs unsandboxed: these tests are about
// the API, the sandbox's own tests about isolation.
func codeEnv(t *testing.T) *env {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the code interpreter tests run real code")
	}
	r, err := sandbox.New(sandbox.Options{TempDir: t.TempDir(), Timeout: 10 * time.Second,
		AllowUnsandboxed: os.Geteuid() != 0, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Available(); err != nil {
		t.Fatalf("sandbox unavailable: %v", err)
	}
	return withRunner(t, r)
}

func withRunner(t *testing.T, r CodeRunner) *env {
	e := newEnv(t, envOptions{})
	e.svc.code = r
	return e
}

func TestCodeInterpreter(t *testing.T) {
	e := codeEnv(t)
	tests := []struct {
		name, tool, include string
		container           string // "" for a minted one
		outputs             bool
	}{
		{"auto container", `{"type":"code_interpreter","container":{"type":"auto"}}`, ``, "", false},
		{"auto with memory limit", `{"type":"code_interpreter","container":{"type":"auto","memory_limit":"1g","file_ids":[]}}`, ``, "", false},
		{"container id", `{"type":"code_interpreter","container":"cntr_abc123"}`, ``, "cntr_abc123", false},
		{"outputs included", `{"type":"code_interpreter","container":{"type":"auto"}}`,
			`,"include":["code_interpreter_call.outputs"]`, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.rec.count()
			r := e.create("alice", `{"model":"m","input":"Compute something.","tools":[`+tc.tool+`]`+tc.include+`}`)
			// The fake model calls the first function, python, with code
			// "sample", then answers with the tool's text: the traceback.
			ci, msg := r.Get("output.0"), r.Get("output.1")
			if r.Get("output.#").Int() != 2 || ci.Get("type").Str != "code_interpreter_call" || ci.Get("status").Str != "completed" ||
				!strings.HasPrefix(ci.Get("id").Str, "ci_") || ci.Get("code").Str != "sample" || msg.Get("type").Str != "message" {
				t.Fatalf("output %s", r.Get("output").Raw)
			}
			if cid := ci.Get("container_id").Str; (tc.container == "" && !strings.HasPrefix(cid, "cntr_")) ||
				(tc.container != "" && cid != tc.container) {
				t.Errorf("container_id %q", cid)
			}
			if !tc.outputs && ci.Get("outputs").Type != gjson.Null {
				t.Errorf("outputs without include: %s", ci.Get("outputs").Raw)
			}
			if tc.outputs {
				outs := ci.Get("outputs").Array()
				if len(outs) != 1 || outs[0].Get("type").Str != "logs" || !strings.Contains(outs[0].Get("logs").Str, nameError) ||
					!strings.HasPrefix(outs[0].Get("logs").Str, "Traceback") {
					t.Errorf("outputs %s", ci.Get("outputs").Raw)
				}
			}
			if txt := outputText(r); !strings.HasPrefix(txt, "The tool returned: Traceback") || !strings.Contains(txt, nameError) {
				t.Errorf("text %q", txt)
			}
			if r.Get("tools.0").Raw != tc.tool {
				t.Errorf("tools echo %s", r.Get("tools").Raw)
			}

			// The model was offered python as a function and got the logs
			// back as the call's tool message.
			if e.rec.count()-before != 2 {
				t.Fatalf("%d model calls", e.rec.count()-before)
			}
			first := gjson.ParseBytes(e.rec.bodies[before])
			if first.Get("tools.#").Int() != 1 || first.Get("tools.0.function.name").Str != pythonFunction ||
				first.Get("tools.0.function.parameters.required.0").Str != "code" || first.Get("tool_choice").Str != "auto" {
				t.Errorf("first request %s", first.Raw)
			}
			msgs := e.rec.last(t).Get("messages").Array()
			if len(msgs) != 3 || msgs[1].Get("tool_calls.0.function.name").Str != pythonFunction ||
				msgs[2].Get("role").Str != "tool" || msgs[2].Get("tool_call_id").Str != msgs[1].Get("tool_calls.0.id").Str ||
				!strings.Contains(msgs[2].Get("content").Str, nameError) {
				t.Errorf("second request messages %v", msgs)
			}

			// Stored, and the conversation continues without the call.
			status, body := e.do("alice", http.MethodGet, "/v1/responses/"+r.Get("id").Str, "")
			if status != 200 || string(body) != r.Raw {
				t.Errorf("GET: %d %s", status, body)
			}
			e.create("alice", `{"model":"m","previous_response_id":"`+r.Get("id").Str+`","input":"thanks"}`)
			msgs = e.rec.last(t).Get("messages").Array()
			if len(msgs) != 3 || msgs[1].Get("role").Str != "assistant" || msgs[1].Get("content").Str != outputText(r) {
				t.Errorf("follow-up messages %v", msgs)
			}
		})
	}
}

func TestCodeInterpreterStream(t *testing.T) {
	e := codeEnv(t)
	_, evs := e.stream("alice", `{"model":"m","input":"run it","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],
		"include":["code_interpreter_call.outputs"],"stream":true}`)
	checkEvents(t, evs)
	got := types(evs)
	head := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.code_interpreter_call.in_progress",
		"response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
		"response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
		"response.output_item.done", "response.output_item.added", "response.content_part.added"}
	tail := []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if len(got) < len(head)+len(tail) || !slices.Equal(got[:len(head)], head) || !slices.Equal(got[len(got)-len(tail):], tail) {
		t.Fatalf("event types %v", got)
	}
	for _, name := range got[len(head) : len(got)-len(tail)] {
		if name != "response.output_text.delta" {
			t.Fatalf("event types %v", got)
		}
	}
	id := evs[2].data.Get("item.id").Str
	if evs[2].data.Get("item.status").Str != "in_progress" || evs[2].data.Get("item.outputs").Type != gjson.Null {
		t.Errorf("added %s", evs[2].raw)
	}
	for _, ev := range evs[3:8] {
		if ev.data.Get("item_id").Str != id || ev.data.Get("output_index").Int() != 0 {
			t.Errorf("%s: %s", ev.name, ev.raw)
		}
	}
	if evs[4].data.Get("delta").Str != "sample" || evs[5].data.Get("code").Str != "sample" {
		t.Errorf("code events %s / %s", evs[4].raw, evs[5].raw)
	}
	done := evs[8].data.Get("item")
	if done.Get("status").Str != "completed" || !strings.Contains(done.Get("outputs.0.logs").Str, nameError) {
		t.Errorf("done %s", evs[8].raw)
	}
	final := evs[len(evs)-1].data.Get("response")
	// (The Response re-encodes items with encoding/json, which escapes
	// HTML characters: compare values, not raw JSON.)
	if fc := final.Get("output.0"); fc.Get("id").Str != id || fc.Get("status").Str != "completed" ||
		fc.Get("outputs.0.logs").Str != done.Get("outputs.0.logs").Str || !strings.Contains(outputText(final), nameError) {
		t.Errorf("final %s", final.Raw)
	}
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+final.Get("id").Str, "")
	if status != 200 || string(body) != final.Raw {
		t.Errorf("GET after stream: %d %s", status, body)
	}
}

// stubRunner is a CodeRunner with a fixed answer.
type stubRunner struct {
	avail error
	res   sandbox.Result
	err   error
	codes []string
}

func (s *stubRunner) Available() error { return s.avail }

func (s *stubRunner) Run(_ context.Context, code string) (sandbox.Result, error) {
	s.codes = append(s.codes, code)
	return s.res, s.err
}

func TestCodeInterpreterOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		runner  *stubRunner
		status  string
		text    string // in the final answer
		hasLogs bool
	}{
		{"printed", &stubRunner{res: sandbox.Result{Stdout: "42\n"}}, "completed", "The tool returned: 42", true},
		{"stdout and stderr", &stubRunner{res: sandbox.Result{Stdout: "a", Stderr: "warn\n"}}, "completed", "a\nwarn", true},
		{"printed nothing", &stubRunner{res: sandbox.Result{}}, "completed", "printed nothing", false},
		{"timed out", &stubRunner{res: sandbox.Result{Stdout: "partial\n", Stderr: "\n[killed: the run exceeded its 30s time limit]",
			TimedOut: true, ExitCode: 137}}, "failed", "time limit", true},
		{"sandbox failure", &stubRunner{err: errors.New("sandbox: setup: pivot_root: EPERM")}, "failed", "running code was not possible", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := withRunner(t, tc.runner)
			_, evs := e.stream("alice", `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],
				"include":["code_interpreter_call.outputs"],"stream":true}`)
			checkEvents(t, evs)
			final := evs[len(evs)-1].data.Get("response")
			ci := final.Get("output.0")
			if final.Get("status").Str != "completed" || ci.Get("status").Str != tc.status || !strings.Contains(outputText(final), tc.text) {
				t.Fatalf("response %s", final.Raw)
			}
			if got := len(ci.Get("outputs").Array()); (got == 1) != tc.hasLogs {
				t.Errorf("outputs %s", ci.Get("outputs").Raw)
			}
			completed := slices.Contains(types(evs), "response.code_interpreter_call.completed")
			if completed != (tc.status == "completed") {
				t.Errorf("completed event %v for status %s", completed, tc.status)
			}
			if len(tc.runner.codes) != 1 || tc.runner.codes[0] != "sample" {
				t.Errorf("codes run %q", tc.runner.codes)
			}
		})
	}
}

func TestCodeInterpreterOptions(t *testing.T) {
	runner := &stubRunner{res: sandbox.Result{Stdout: "ok\n"}}
	e := withRunner(t, runner)

	// A forced code_interpreter is a forced call to python, first step only.
	r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],
		"tool_choice":{"type":"code_interpreter"}}`)
	if got := gjson.ParseBytes(e.rec.bodies[0]).Get("tool_choice").Raw; got != `{"type":"function","function":{"name":"python"}}` {
		t.Errorf("first tool_choice %s", got)
	}
	if got := e.rec.last(t).Get("tool_choice").Raw; got != `"auto"` {
		t.Errorf("second tool_choice %s", got)
	}
	if r.Get("tool_choice").Raw != `{"type":"code_interpreter"}` || r.Get("output.0.type").Str != "code_interpreter_call" {
		t.Errorf("response %s", r.Raw)
	}

	// With a function tool first, the fake model calls it: that goes back
	// to the client, no code runs.
	n := len(runner.codes)
	r = e.create("alice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{}}},
		{"type":"code_interpreter","container":{"type":"auto"}}]}`)
	if r.Get("output.#").Int() != 1 || r.Get("output.0.type").Str != "function_call" || len(runner.codes) != n {
		t.Errorf("output %s", r.Get("output").Raw)
	}
	if tools := e.rec.last(t).Get("tools.#.function.name").Raw; tools != `["f","python"]` {
		t.Errorf("tools offered %s", tools)
	}

	// max_tool_calls bounds code runs like searches.
	r = e.create("alice", `{"model":"m","input":"x","max_tool_calls":1,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`)
	if e.rec.last(t).Get("tools").Exists() || r.Get("output.#").Int() != 2 {
		t.Errorf("after the one allowed call: %s", e.rec.last(t).Raw)
	}

	// A client replaying the call item in its input is accepted; the item
	// is not sent to the model.
	ci := r.Get("output.0").Raw
	e.create("alice", `{"model":"m","input":[{"role":"user","content":"x"},`+ci+`,{"role":"user","content":"again"}]}`)
	if msgs := e.rec.last(t).Get("messages.#").Int(); msgs != 2 {
		t.Errorf("replayed call sent to the model: %s", e.rec.last(t).Get("messages").Raw)
	}
}

func TestCodeInterpreterRefused(t *testing.T) {
	const tool = `{"type":"code_interpreter","container":{"type":"auto"}}`
	tests := []struct {
		name   string
		runner CodeRunner
		body   string
		param  string
	}{
		{"no runner", nil, `{"model":"m","input":"x","tools":[` + tool + `]}`, "tools"},
		{"runner unavailable", &stubRunner{avail: errors.New("no namespaces")}, `{"model":"m","input":"x","tools":[` + tool + `]}`, "tools"},
		{"no container", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter"}]}`, "tools[0].container"},
		{"empty container id", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":""}]}`, "tools[0].container"},
		{"container type", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"gpu"}}]}`, "tools[0].container.type"},
		{"container files", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1"]}}]}`, "tools[0].container.file_ids"},
		{"container network", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["a.example"]}}}]}`, "tools[0].container.network_policy"},
		{"container number", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":5}]}`, "tools[0].container"},
		{"duplicate", &stubRunner{}, `{"model":"m","input":"x","tools":[` + tool + `,` + tool + `]}`, "tools[1].type"},
		{"python reserved after", &stubRunner{}, `{"model":"m","input":"x","tools":[` + tool + `,{"type":"function","name":"python"}]}`, "tools[1].name"},
		{"python reserved before", &stubRunner{}, `{"model":"m","input":"x","tools":[{"type":"function","name":"python"},` + tool + `]}`, "tools"},
		{"tool_choice without the tool", &stubRunner{}, `{"model":"m","input":"x","tool_choice":{"type":"code_interpreter"}}`, "tool_choice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.svc.code = tc.runner
			status, body := e.do("alice", http.MethodPost, "/v1/responses", tc.body)
			wantError(t, status, body, 400, tc.param)
			if tc.param == "tools" && tc.runner == nil && !strings.Contains(gjson.GetBytes(body, "error.message").Str, "not available on this gateway") {
				t.Errorf("message %s", body)
			}
			if e.rec.count() != 0 {
				t.Errorf("%d model calls", e.rec.count())
			}
		})
	}
}

func TestCodeInterpreterBareArguments(t *testing.T) {
	runner := &stubRunner{res: sandbox.Result{Stdout: "3\n"}}
	svc, err := New(t.Context(), Options{DataDir: t.TempDir(), Gateway: &rawPythonGateway{}, CodeInterpreter: runner,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	e := &env{t: t, svc: svc, srv: newTestServer(t, svc)}
	r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`)
	if len(runner.codes) != 1 || runner.codes[0] != "print(1 + 2)" || r.Get("output.0.code").Str != "print(1 + 2)" {
		t.Errorf("codes %q, output %s", runner.codes, r.Get("output").Raw)
	}
}

// rawPythonGateway is a model that calls python with the program as its
// raw arguments, as models trained on OpenAI's own python tool do, then
// answers.
type rawPythonGateway struct{}

func (g *rawPythonGateway) Do(_ context.Context, _, _, _, _ string, body io.Reader) (*http.Response, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	out := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}]}`
	if !strings.Contains(gjson.GetBytes(b, "messages.#.role").Raw, `"tool"`) {
		out = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
			`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"python","arguments":"print(1 + 2)"}}]},"finish_reason":"tool_calls"}]}`
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(out))}, nil
}

func newTestServer(t *testing.T, svc *Service) *httptest.Server {
	srv := httptest.NewServer(withCaller(svc.Handler()))
	t.Cleanup(srv.Close)
	return srv
}
