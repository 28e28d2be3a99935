package responses

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

func init() {
	eventSchemas["response.file_search_call.in_progress"] = "ResponseFileSearchCallInProgressEvent"
	eventSchemas["response.file_search_call.searching"] = "ResponseFileSearchCallSearchingEvent"
	eventSchemas["response.file_search_call.completed"] = "ResponseFileSearchCallCompletedEvent"
}

// fsEnv is an env whose service searches real vector stores: the real
// files store and vectorstores service, embedding through the same fake
// OpenAI upstream that plays the model.
type fsEnv struct {
	*env
	files   *files.Store
	vs      *vectorstores.Service
	vsFault *faultTransport // the vector stores' own gateway client
}

func newFileSearchEnv(t *testing.T) *fsEnv {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", fake.KindOpenAI, fake.Options{APIKey: testToken})
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
	fs, err := files.Open(ctx, dir, files.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	vgw := onbehalf.New("http://"+addr.String()+"/v1", testToken)
	vft := &faultTransport{base: vgw.HTTP.Transport}
	vgw.HTTP = &http.Client{Transport: vft}
	vs, err := vectorstores.New(ctx, vectorstores.Options{DataDir: dir, Files: fs, Gateway: vgw, EmbeddingModel: "demo/embed", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- vs.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		vs.Close()
	})

	gw := onbehalf.New("http://"+addr.String()+"/v1", testToken)
	ft := &faultTransport{base: gw.HTTP.Transport}
	gw.HTTP = &http.Client{Transport: ft}
	rec := &recorder{gw: gw}
	clk := &clock{t: time.Unix(1_750_000_000, 0)}
	svc, err := New(ctx, Options{DataDir: dir, Gateway: rec, FileSearch: vs, Now: clk.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(withCaller(svc.Handler()))
	t.Cleanup(srv.Close)
	return &fsEnv{env: &env{t: t, svc: svc, srv: srv, rec: rec, faults: ft, clock: clk}, files: fs, vs: vs, vsFault: vft}
}

// store uploads files (name → content) for owner, puts them in a new
// vector store, waits for the indexing and returns the store id and the
// file ids by name.
func (e *fsEnv) store(owner string, contents map[string]string) (string, map[string]string) {
	e.t.Helper()
	ids := map[string]string{}
	var list []string
	for name, content := range contents {
		f, err := e.files.Create(e.t.Context(), owner, files.File{Filename: name, Purpose: files.PurposeAssistants}, strings.NewReader(content), 0)
		if err != nil {
			e.t.Fatal(err)
		}
		ids[name] = f.ID
		list = append(list, `"`+f.ID+`"`)
	}
	st := e.vsDo(owner, http.MethodPost, "/v1/vector_stores", `{"file_ids":[`+strings.Join(list, ",")+`]}`)
	id := st.Get("id").Str
	deadline := time.Now().Add(20 * time.Second)
	for st.Get("status").Str != "completed" {
		if time.Now().After(deadline) {
			e.t.Fatalf("store not indexed: %s", st.Raw)
		}
		time.Sleep(10 * time.Millisecond)
		st = e.vsDo(owner, http.MethodGet, "/v1/vector_stores/"+id, "")
	}
	if st.Get("file_counts.completed").Int() != int64(len(contents)) {
		e.t.Fatalf("store %s", st.Raw)
	}
	return id, ids
}

func (e *fsEnv) vsDo(owner, method, path, body string) gjson.Result {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequestWithContext(caller.With(e.t.Context(), caller.Caller{Owner: owner}), method, path, rd)
	w := httptest.NewRecorder()
	e.vs.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		e.t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
	return gjson.ParseBytes(w.Body.Bytes())
}

// docs is a corpus where the fake model's query, "sample", matches one file.
var docs = map[string]string{
	"manual.txt": "This sample manual explains the sample setup step by step.",
	"garden.md":  "Unrelated notes about tomatoes, basil and watering.",
}

func TestFileSearch(t *testing.T) {
	tests := []struct {
		name        string
		extra       string // request fields
		wantResults bool
	}{
		{"results omitted", ``, false},
		{"results included", `,"include":["file_search_call.results"]`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newFileSearchEnv(t)
			vsID, fids := e.store("alice", docs)
			tool := `{"type":"file_search","vector_store_ids":["` + vsID + `"],"max_num_results":2}`
			r := e.create("alice", `{"model":"m","input":"What does the manual say?","tools":[`+tool+`]`+tc.extra+`}`)

			// The fake model calls the first function, file_search, with
			// query "sample", then answers with the tool's text.
			fs, msg := r.Get("output.0"), r.Get("output.1")
			if r.Get("output.#").Int() != 2 || fs.Get("type").Str != "file_search_call" || fs.Get("status").Str != "completed" ||
				!strings.HasPrefix(fs.Get("id").Str, "fs_") || fs.Get("queries").Raw != `["sample"]` {
				t.Fatalf("output %s", r.Get("output").Raw)
			}
			if r.Get("tools.0").Raw != tool {
				t.Errorf("tools echo %s", r.Get("tools").Raw)
			}
			if !tc.wantResults {
				if fs.Get("results").Type != gjson.Null {
					t.Errorf("results %s", fs.Raw)
				}
			} else {
				res := fs.Get("results").Array()
				if len(res) != 2 || res[0].Get("file_id").Str != fids["manual.txt"] || res[0].Get("filename").Str != "manual.txt" ||
					!strings.Contains(res[0].Get("text").Str, "sample setup") || res[0].Get("score").Float() <= res[1].Get("score").Float() ||
					res[0].Get("score").Float() > 1 || res[0].Get("attributes").Type != gjson.Null {
					t.Errorf("results %s", fs.Get("results").Raw)
				}
			}

			text := outputText(r)
			if !strings.HasPrefix(text, `The tool returned: File search results for "sample":`) || !strings.Contains(text, "sample setup") {
				t.Errorf("text %q", text)
			}
			// Both files were given to the model and the text names both:
			// each is cited just after its first mention.
			anns := msg.Get("content.0.annotations").Array()
			if len(anns) != 2 {
				t.Fatalf("annotations %s", msg.Get("content.0.annotations").Raw)
			}
			for _, a := range anns {
				name := a.Get("filename").Str
				want := utf8.RuneCountInString(text[:strings.Index(text, name)+len(name)])
				if a.Get("type").Str != "file_citation" || a.Get("file_id").Str != fids[name] || a.Get("index").Int() != int64(want) {
					t.Errorf("annotation %s (want index %d)", a.Raw, want)
				}
			}
			if anns[0].Get("index").Int() > anns[1].Get("index").Int() || anns[0].Get("filename").Str != "manual.txt" {
				t.Errorf("annotations not in text order: %s", msg.Get("content.0.annotations").Raw)
			}

			// The model was offered the search as a function and got the
			// passages back as the call's tool message.
			first := gjson.ParseBytes(e.rec.bodies[0])
			if first.Get("tools.#").Int() != 1 || first.Get("tools.0.function.name").Str != fileSearchFunction {
				t.Errorf("first request %s", first.Raw)
			}
			msgs := e.rec.last(t).Get("messages").Array()
			if len(msgs) != 3 || msgs[1].Get("tool_calls.0.function.name").Str != fileSearchFunction ||
				msgs[2].Get("role").Str != "tool" || !strings.Contains(msgs[2].Get("content").Str, "File: manual.txt") {
				t.Errorf("second request messages %v", msgs)
			}

			// The conversation continues; the call item is kept, not
			// replayed, and a client may send it back as input.
			r2 := e.create("alice", `{"model":"m","previous_response_id":"`+r.Get("id").Str+`","input":[`+fs.Raw+`,{"role":"user","content":"thanks"}]}`)
			msgs = e.rec.last(t).Get("messages").Array()
			if len(msgs) != 3 || msgs[1].Get("role").Str != "assistant" || msgs[1].Get("content").Str != text || r2.Get("status").Str != "completed" {
				t.Errorf("follow-up messages %v", msgs)
			}
		})
	}
}

func TestFileSearchStream(t *testing.T) {
	e := newFileSearchEnv(t)
	vsID, fids := e.store("alice", map[string]string{"manual.txt": docs["manual.txt"]})
	_, evs := e.stream("alice", `{"model":"m","input":"x","stream":true,"include":["file_search_call.results"],
		"tools":[{"type":"file_search","vector_store_ids":["`+vsID+`"]}]}`)
	checkEvents(t, evs)
	got := types(evs)
	head := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.file_search_call.in_progress", "response.file_search_call.searching",
		"response.file_search_call.completed", "response.output_item.done",
		"response.output_item.added", "response.content_part.added"}
	tail := []string{"response.output_text.annotation.added", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}
	if len(got) < len(head)+len(tail) || !slices.Equal(got[:len(head)], head) || !slices.Equal(got[len(got)-len(tail):], tail) {
		t.Fatalf("event types %v", got)
	}
	for _, name := range got[len(head) : len(got)-len(tail)] {
		if name != "response.output_text.delta" {
			t.Fatalf("event types %v", got)
		}
	}
	id := evs[2].data.Get("item.id").Str
	if evs[2].data.Get("item.status").Str != "in_progress" || evs[2].data.Get("item.results").Type != gjson.Null {
		t.Errorf("added %s", evs[2].raw)
	}
	for _, ev := range evs[3:7] {
		if ev.data.Get("output_index").Int() != 0 || (ev.name != "response.output_item.done" && ev.data.Get("item_id").Str != id) {
			t.Errorf("%s: %s", ev.name, ev.raw)
		}
	}
	done := evs[6].data.Get("item")
	if done.Get("status").Str != "completed" || done.Get("results.0.file_id").Str != fids["manual.txt"] {
		t.Errorf("done %s", evs[6].raw)
	}
	ann := evs[len(evs)-5].data
	if ann.Get("annotation.type").Str != "file_citation" || ann.Get("annotation.file_id").Str != fids["manual.txt"] ||
		ann.Get("output_index").Int() != 1 || ann.Get("annotation_index").Int() != 0 {
		t.Errorf("annotation event %s", evs[len(evs)-5].raw)
	}
	final := evs[len(evs)-1].data.Get("response")
	if final.Get("output.0.id").Str != id || final.Get("output.1.content.0.annotations.0.file_id").Str != fids["manual.txt"] {
		t.Errorf("final %s", final.Raw)
	}
}

func TestFileSearchOptions(t *testing.T) {
	e := newFileSearchEnv(t)
	vsID, _ := e.store("alice", docs)
	tool := `{"type":"file_search","vector_store_ids":["` + vsID + `"]}`

	// A forced file search is a forced call to the function, on the first
	// step only; with a function tool listed first, the fake model calls
	// the function tool_choice names.
	r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{}}},`+tool+`],
		"tool_choice":{"type":"file_search"}}`)
	if got := gjson.ParseBytes(e.rec.bodies[0]).Get("tool_choice").Raw; got != `{"type":"function","function":{"name":"file_search"}}` {
		t.Errorf("first tool_choice %s", got)
	}
	if got := e.rec.last(t).Get("tool_choice").Raw; got != `"auto"` {
		t.Errorf("second tool_choice %s", got)
	}
	if r.Get("output.0.type").Str != "file_search_call" {
		t.Errorf("output %s", r.Get("output").Raw)
	}

	// max_tool_calls counts file searches: after one, the tool is no
	// longer offered.
	n := e.rec.count()
	e.create("alice", `{"model":"m","input":"x","max_tool_calls":1,"tools":[`+tool+`]}`)
	if e.rec.count()-n != 2 || e.rec.last(t).Get("tools").Exists() {
		t.Errorf("after the allowed call: %s", e.rec.last(t).Raw)
	}

	// A failing search (the embeddings request fails) is a failed call the
	// model is told about; the response still completes.
	e.vsFault.mu.Lock()
	e.vsFault.hdr = map[string]string{fake.HeaderStatus: "400"}
	e.vsFault.mu.Unlock()
	r = e.create("alice", `{"model":"m","input":"x","tools":[`+tool+`]}`)
	if r.Get("output.0.status").Str != "failed" || r.Get("status").Str != "completed" ||
		!strings.Contains(outputText(r), "searching the files was not possible") || r.Get("output.1.content.0.annotations.#").Int() != 0 {
		t.Errorf("failed search %s", r.Get("output").Raw)
	}
}

func TestFileSearchValidation(t *testing.T) {
	e := newFileSearchEnv(t)
	vsID, _ := e.store("alice", docs)
	bobStore, _ := e.store("bob", map[string]string{"b.txt": "bob"})
	tests := []struct {
		name, tools, extra, param, message string
	}{
		{"missing stores", `[{"type":"file_search"}]`, ``, "tools[0].vector_store_ids", ""},
		{"empty stores", `[{"type":"file_search","vector_store_ids":[]}]`, ``, "tools[0].vector_store_ids", "empty"},
		{"unknown store", `[{"type":"file_search","vector_store_ids":["vs_nope"]}]`, ``, "tools[0].vector_store_ids", "'vs_nope' not found"},
		{"another owner's store", `[{"type":"file_search","vector_store_ids":["` + vsID + `","` + bobStore + `"]}]`, ``, "tools[0].vector_store_ids", bobStore},
		{"max_num_results", `[{"type":"file_search","vector_store_ids":["` + vsID + `"],"max_num_results":51}]`, ``, "tools[0].max_num_results", ""},
		{"filters", `[{"type":"file_search","vector_store_ids":["` + vsID + `"],"filters":{"type":"eq","key":"k","value":"v"}}]`, ``, "tools[0].filters", ""},
		{"hybrid", `[{"type":"file_search","vector_store_ids":["` + vsID + `"],"ranking_options":{"hybrid_search":{"embedding_weight":1,"text_weight":1}}}]`, ``, "tools[0].ranking_options.hybrid_search", ""},
		{"duplicate", `[{"type":"file_search","vector_store_ids":["` + vsID + `"]},{"type":"file_search","vector_store_ids":["` + vsID + `"]}]`, ``, "tools[1].type", ""},
		{"reserved name", `[{"type":"file_search","vector_store_ids":["` + vsID + `"]},{"type":"function","name":"file_search"}]`, ``, "tools[1].name", ""},
		{"reserved name first", `[{"type":"function","name":"file_search"},{"type":"file_search","vector_store_ids":["` + vsID + `"]}]`, ``, "tools", ""},
		{"tool_choice without the tool", `[]`, `,"tool_choice":{"type":"file_search"}`, "tool_choice", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","tools":`+tc.tools+tc.extra+`}`)
			wantError(t, status, body, http.StatusBadRequest, tc.param)
			if msg := gjson.GetBytes(body, "error.message").Str; !strings.Contains(msg, tc.message) {
				t.Errorf("message %q, want %q", msg, tc.message)
			}
		})
	}
	if e.rec.count() != 0 {
		t.Errorf("%d model calls for refused requests", e.rec.count())
	}

	// Without vector stores configured the tool is not available, whatever
	// its fields say.
	plain := newEnv(t, envOptions{})
	status, body := plain.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","tools":[{"type":"file_search","vector_store_ids":["`+vsID+`"]}]}`)
	wantError(t, status, body, http.StatusBadRequest, "tools")
	if msg := gjson.GetBytes(body, "error.message").Str; !strings.Contains(msg, "'file_search' is not available") {
		t.Errorf("message %q", msg)
	}
}
