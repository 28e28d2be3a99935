package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

// npmDir is the Node project of the npm SDK tests (package.json and its
// committed package-lock.json; node_modules is installed there, not
// committed).
const npmDir = "npm"

// npmMinNode is the oldest Node.js major the pinned packages support.
const npmMinNode = 20

// npmInstallTimeout bounds `npm ci`: some 100 MB from the registry.
const npmInstallTimeout = 5 * time.Minute

// npmScriptTimeout bounds one script's run against the gateway (a few
// seconds when all goes well).
const npmScriptTimeout = 90 * time.Second

// npmWantEvent is the Event the scripts' zod schema (e2e/npm/common.mjs)
// gets from every demo vendor: the fake vendors answer structured outputs
// with a deterministic sample of the schema (internal/testing/fake's
// sampleJSON), and the helpers parse it into this.
const npmWantEvent = `{"name":"sample","date":"sample","participants":["sample"],"priority":"low",` +
	`"venue":{"city":"sample","capacity":1},"notes":"sample"}`

// npmStep is what one step of a script must have printed: want, if set, is
// JSON whose members the step's result must have with these values
// (objects compared member by member, so the result may have more; arrays
// and scalars exactly), and check, if set, looks at the rest.
type npmStep struct {
	want  string
	check func(got map[string]any) error
}

// npmScript is one script of e2e/npm and what each of its steps must show
// on vendor v.
type npmScript struct {
	file  string
	steps func(v matrixVendor) map[string]npmStep
}

// atLeast checks that the result's member key is a number of at least min
// (chunks of a stream: more than one shows it streamed).
func atLeast(key string, min float64) func(map[string]any) error {
	return func(got map[string]any) error {
		n, ok := got[key].(float64)
		return expect(ok && n >= min, "%s = %v, want at least %v", key, got[key], min)
	}
}

// contains checks that the result's member key is an array holding each
// of items.
func contains(key string, items ...string) func(map[string]any) error {
	return func(got map[string]any) error {
		arr, _ := got[key].([]any)
		for _, it := range items {
			if !slices.Contains(arr, any(it)) {
				return fmt.Errorf("%s = %v lacks %q", key, got[key], it)
			}
		}
		return nil
	}
}

// jsonModeObject checks a JSON-mode (json_object) answer: any JSON object
// is right; the fake vendors answer one with a string member "answer".
func jsonModeObject(got map[string]any) error {
	obj, ok := got["object"].(map[string]any)
	if !ok {
		return fmt.Errorf("object = %s, want a JSON object", jsonText(got["object"]))
	}
	_, ok = obj["answer"].(string)
	return expect(ok, "object = %s, want a string member answer", jsonText(obj))
}

// pollsPaced checks the polls of an uploadAndPoll (a file batch's or a
// file's): the last one saw it completed, and each that saw it in progress
// was told when to come back (openai-poll-after-ms; the helper waits 5 s
// without it).
func pollsPaced(got map[string]any) error {
	polls, _ := got["polls"].([]any)
	if len(polls) == 0 {
		return fmt.Errorf("no polls recorded")
	}
	for i, p := range polls {
		p, _ := p.(map[string]any)
		last := i == len(polls)-1
		switch {
		case last && p["status"] != "completed":
			return fmt.Errorf("last poll %v, want completed", p)
		case !last && (p["status"] != "in_progress" || p["poll_after_ms"] == nil):
			return fmt.Errorf("poll %d of %d: %v, want in_progress with openai-poll-after-ms", i+1, len(polls), p)
		}
	}
	return nil
}

var npmScripts = []npmScript{
	{file: "openai.mjs", steps: func(v matrixVendor) map[string]npmStep {
		parsed := `"parsed":` + npmWantEvent + `,"valid":true`
		return map[string]npmStep{
			"chat_parse":        {want: `{` + parsed + `,"refusal":null,"finish_reason":"stop","model":"` + v.chat + `"}`},
			"chat_stream_parse": {want: `{` + parsed + `,"finish_reason":"stop"}`, check: atLeast("chunks", 3)},
			"responses_parse":   {want: `{` + parsed + `,"status":"completed","model":"` + v.chat + `"}`},
			"responses_stream_parse": {want: `{` + parsed + `,"status":"completed"}`,
				check: contains("events", "response.created", "response.output_text.delta", "response.output_text.done", "response.completed")},
			"chat_parse_tool":      {want: `{"finish_reason":"tool_calls","calls":[{"name":"get_weather","parsed_arguments":{"city":"sample"}}]}`},
			"responses_parse_tool": {want: `{"status":"completed","calls":[{"name":"get_weather","parsed_arguments":{"city":"sample"}}]}`},
			"run_tools_stream":     {want: `{"called":[{"city":"sample"}],"content":"The tool returned: sunny, 21C"}`, check: atLeast("chunks", 2)},
			"run_tools":            {want: `{"called":[{"city":"sample"}],"content":"The tool returned: sunny, 21C","messages":["user","assistant","tool","assistant"]}`},
			"file_upload":          {want: `{"object":"vector_store.file","status":"completed","vector_store_id":true}`, check: pollsPaced},
			"file_batch": {want: `{"object":"vector_store.files_batch","status":"completed",` +
				`"file_counts":{"in_progress":0,"completed":2,"failed":0,"cancelled":0,"total":2},"vector_store_id":true,` +
				`"files":[{"filename":"aurora.txt","status":"completed"},{"filename":"bread.txt","status":"completed"}],` +
				`"top_hit":{"filename":"bread.txt","text":"Sourdough bread needs a starter, flour, water and salt."}}`,
				check: pollsPaced},
		}
	}},
	{file: "ai.mjs", steps: func(v matrixVendor) map[string]npmStep {
		steps := map[string]npmStep{}
		for _, api := range []string{"responses", "chat"} {
			steps["generate_object_"+api] = npmStep{want: `{"object":` + npmWantEvent + `,"valid":true,"finish_reason":"stop"}`, check: atLeast("output_tokens", 1)}
			steps["generate_array_"+api] = npmStep{want: `{"object":[` + npmWantEvent + `],"valid":[true]}`}
			steps["generate_enum_"+api] = npmStep{want: `{"object":"red"}`}
			steps["generate_json_"+api] = npmStep{check: jsonModeObject}
			steps["stream_object_"+api] = npmStep{want: `{"object":` + npmWantEvent + `,"valid":true,"finish_reason":"stop"}`, check: atLeast("partials", 2)}
			steps["stream_text_"+api] = npmStep{want: `{"text":"Echo: hello ` + v.chat + `","finish_reason":"stop"}`,
				check: func(got map[string]any) error {
					if err := atLeast("deltas", 2)(got); err != nil {
						return err
					}
					return atLeast("output_tokens", 1)(got)
				}}
			steps["tools_"+api] = npmStep{want: `{"called":[{"city":"sample"}],"text":"The tool returned: sunny, 21C","steps":2,"finish_reason":"stop"}`}
		}
		steps["embed_many"] = npmStep{want: `{"embeddings":2,"dimensions":[1536,1536],"differ":true}`, check: atLeast("tokens", 1)}
		return steps
	}},
	{file: "langchain.mjs", steps: func(v matrixVendor) map[string]npmStep {
		steps := map[string]npmStep{}
		for _, api := range []string{"chat", "responses"} {
			for _, method := range []string{"jsonSchema", "functionCalling"} {
				steps["structured_"+method+"_"+api] = npmStep{want: `{"object":` + npmWantEvent + `,"valid":true}`}
			}
			steps["structured_jsonMode_"+api] = npmStep{check: jsonModeObject}
			steps["invoke_"+api] = npmStep{want: `{"text":"Echo: hello ` + v.chat + `"}`, check: atLeast("output_tokens", 1)}
			steps["stream_"+api] = npmStep{want: `{"text":"Echo: hello ` + v.chat + `"}`, check: atLeast("chunks", 2)}
		}
		steps["embed_documents"] = npmStep{want: `{"embeddings":2,"dimensions":[1536,1536]}`}
		return steps
	}},
	{file: "agents.mjs", steps: func(v matrixVendor) map[string]npmStep {
		steps := map[string]npmStep{}
		for _, api := range []string{"responses", "chat"} {
			steps["output_type_"+api] = npmStep{want: `{"output":` + npmWantEvent + `,"valid":true}`}
			steps["tools_"+api] = npmStep{want: `{"called":[{"city":"sample"}],"output":"The tool returned: sunny, 21C"}`}
			steps["tools_stream_"+api] = npmStep{want: `{"called":[{"city":"sample"}],"output":"The tool returned: sunny, 21C"}`, check: atLeast("deltas", 2)}
		}
		return steps
	}},
}

// TestNPMSDKs drives the helpers that only the npm SDKs have (the openai
// package's zod-parsed structured outputs, tool runner and file-batch
// upload; the Vercel AI SDK's generateObject and streamText; LangChain's
// withStructuredOutput; the Agents SDK's outputType and tools) against every demo vendor of the default
// configuration, through the whole in-process gateway. Each script of
// e2e/npm runs once per vendor's chat model and prints what it saw as JSON.
// It installs the pinned packages (npm ci) when node_modules is missing or
// older than package-lock.json.
func TestNPMSDKs(t *testing.T) {
	dir := npmInstall(t)
	s, fakes := newDefaultConfigStack(t)
	// The group returns once every parallel script has.
	t.Run("scripts", func(t *testing.T) {
		for _, sc := range npmScripts {
			for _, v := range matrixVendors {
				t.Run(strings.TrimSuffix(sc.file, ".mjs")+"/"+v.name, func(t *testing.T) {
					t.Parallel()
					got, stderr, err := npmRun(t, dir, sc.file, s.gw.BaseURL(), s.key, v.chat)
					if err != nil {
						t.Fatalf("%v\nstderr:\n%s", err, stderr)
					}
					want := sc.steps(v)
					for name, step := range want {
						res, ok := got[name].(map[string]any)
						if !ok {
							t.Errorf("%s: no result: %v", name, got[name])
							continue
						}
						if e, failed := res["error"]; failed {
							t.Errorf("%s threw: %v", name, e)
							continue
						}
						if step.want != "" {
							var w any
							if err := json.Unmarshal([]byte(step.want), &w); err != nil {
								t.Fatalf("%s: bad want %s: %v", name, step.want, err)
							}
							for _, d := range jsonSubset(w, res, name) {
								t.Error(d)
							}
						}
						if step.check != nil {
							if err := step.check(res); err != nil {
								t.Errorf("%s: %v", name, err)
							}
						}
					}
					for name := range got {
						if _, ok := want[name]; !ok {
							t.Errorf("%s printed step %s, which the test does not check", sc.file, name)
						}
					}
					if t.Failed() {
						t.Logf("stderr:\n%s", stderr)
					}
				})
			}
		}
	})
	// Each script's model calls reached the vendor the model is routed to,
	// in its own wire format (the prompts name the model).
	t.Run("vendors reached", func(t *testing.T) {
		for _, v := range matrixVendors {
			mark := []byte(`launch party for ` + v.chat + `"`)
			n := 0
			for _, r := range fakes[v.kind].all() {
				if bytes.Contains(r.body, mark) {
					n++
				}
			}
			// One call per structured-output step: 4 of openai.mjs, 10 of
			// ai.mjs, 6 of langchain.mjs, 2 of agents.mjs.
			if n < 22 {
				t.Errorf("%d structured-output calls for %s reached the %s fake, want at least 22", n, v.chat, v.kind)
			}
		}
	})
}

// jsonSubset lists where got differs from want: want's object members must
// be in got with equal values (got may have more); arrays and scalars must
// be equal.
func jsonSubset(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s = %s, want an object %s", path, jsonText(got), jsonText(want))}
		}
		var diffs []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s missing, want %s", path, k, jsonText(wv)))
				continue
			}
			diffs = append(diffs, jsonSubset(wv, gv, path+"."+k)...)
		}
		slices.Sort(diffs)
		return diffs
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s = %s, want %s", path, jsonText(got), jsonText(want))}
		}
		return nil
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// npmRun runs one script of dir against the gateway at baseURL on model and
// returns the JSON object it printed, and its stderr.
func npmRun(t *testing.T, dir, script, baseURL, key, model string) (map[string]any, string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), npmScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	// Only what the scripts need: no OPENAI_*, LANGSMITH_* (tracing) or
	// proxy settings of the caller's shell leak in.
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"OPENAI_BASE_URL=" + baseURL,
		"OPENAI_API_KEY=" + key,
		"SWITCHYARD_MODEL=" + model,
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, stderr.String(), fmt.Errorf("node %s: %w\nstdout:\n%s", script, err, stdout.String())
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		return nil, stderr.String(), fmt.Errorf("node %s printed no JSON object: %w\nstdout:\n%s", script, err, stdout.String())
	}
	return got, stderr.String(), nil
}

// npmInstall makes sure dir's node_modules holds exactly what its
// package-lock.json pins, running `npm ci` when it does not (a stamp in
// node_modules records the lock file and Node version it was installed
// for), and returns dir. Without node and npm the test skips, or fails in
// CI.
func npmInstall(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(npmDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			testserver.Unavailable(t, "Node.js ("+tool+")", "the npm SDKs' helpers are not tested (install nodejs and npm, e.g. make test-deps)", err)
		}
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n < npmMinNode {
		testserver.Unavailable(t, fmt.Sprintf("Node.js %d or later", npmMinNode), "the npm SDKs' helpers are not tested",
			fmt.Errorf("node --version says %s", version))
	}

	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	h.Write([]byte(version))
	want := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".switchyard-installed")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return dir
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), npmInstallTimeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s failed (the npm SDK tests need the packages package-lock.json pins, from the npm registry): %v\n%s", dir, err, b)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("npm ci in %s: %s", dir, time.Since(start).Round(time.Second))
	return dir
}
