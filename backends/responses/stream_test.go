package responses

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

func TestStreamText(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, evs := e.stream("alice", `{"model":"m","input":"stream me please","stream":true,"metadata":{"a":"b"}}`)
	if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content-type %q", ct)
	}
	checkEvents(t, evs)

	words := len(strings.Fields("Echo: stream me please"))
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range words {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("event types\n got %v\nwant %v", got, want)
	}

	var deltas strings.Builder
	itemID := evs[2].data.Get("item.id").Str
	for _, ev := range evs {
		if ev.name == "response.output_text.delta" {
			deltas.WriteString(ev.data.Get("delta").Str)
			if ev.data.Get("item_id").Str != itemID || ev.data.Get("output_index").Int() != 0 || ev.data.Get("content_index").Int() != 0 {
				t.Errorf("delta event %s", ev.raw)
			}
		}
	}
	final := evs[len(evs)-1].data.Get("response")
	if deltas.String() != "Echo: stream me please" || outputText(final) != deltas.String() {
		t.Errorf("deltas %q, final text %q", deltas.String(), outputText(final))
	}
	if got := evs[len(evs)-4].data.Get("text").Str; got != deltas.String() {
		t.Errorf("output_text.done text %q", got)
	}
	created := evs[0].data.Get("response")
	if created.Get("status").Str != "in_progress" || created.Get("output").Raw != "[]" || created.Get("id").Str != final.Get("id").Str {
		t.Errorf("created %s", created.Raw)
	}
	if final.Get("status").Str != "completed" || final.Get("usage.output_tokens").Int() != int64(words) || final.Get("metadata.a").Str != "b" {
		t.Errorf("final %s", final.Raw)
	}
	conforms(t, "Response", []byte(final.Raw))

	// response.completed carries exactly what GET returns later.
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+final.Get("id").Str, "")
	if status != 200 || string(body) != final.Raw {
		t.Errorf("GET after stream: %d\n got %s\nwant %s", status, body, final.Raw)
	}
	// The gateway was asked for a stream with usage.
	if b := e.rec.last(t); b.Get("stream").Raw != "true" || b.Get("stream_options.include_usage").Raw != "true" {
		t.Errorf("chat body %s", b.Raw)
	}
}

func TestStreamFunctionCall(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, evs := e.stream("alice", `{"model":"m","input":"call it","stream":true,
		"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}}}}]}`)
	checkEvents(t, evs)
	got := types(evs)
	// The fake streams the arguments in 3 fragments.
	want := []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if !slices.Equal(got, want) {
		t.Fatalf("event types\n got %v\nwant %v", got, want)
	}
	var args strings.Builder
	for _, ev := range evs {
		if ev.name == "response.function_call_arguments.delta" {
			args.WriteString(ev.data.Get("delta").Str)
		}
	}
	done := evs[6].data
	if args.String() != done.Get("arguments").Str || done.Get("name").Str != "lookup" || !gjson.Valid(args.String()) {
		t.Errorf("arguments %q, done %s", args.String(), done.Raw)
	}
	added := evs[2].data.Get("item")
	if added.Get("type").Str != "function_call" || added.Get("status").Str != "in_progress" || added.Get("arguments").Str != "" {
		t.Errorf("added item %s", added.Raw)
	}
	final := evs[len(evs)-1].data.Get("response")
	call := final.Get("output.0")
	if call.Get("arguments").Str != args.String() || call.Get("id").Str != added.Get("id").Str || call.Get("call_id").Str != added.Get("call_id").Str {
		t.Errorf("final call %s", call.Raw)
	}

	// Continue the conversation with the call's output, streamed again.
	_, evs = e.stream("alice", `{"model":"m","stream":true,"previous_response_id":"`+final.Get("id").Str+`",
		"input":[{"type":"function_call_output","call_id":"`+call.Get("call_id").Str+`","output":"42"}]}`)
	checkEvents(t, evs)
	if got := outputText(evs[len(evs)-1].data.Get("response")); got != "The tool returned: 42" {
		t.Errorf("after the tool: %q", got)
	}
}

func TestStreamIncomplete(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, evs := e.stream("alice", `{"model":"m","input":"`+strings.Repeat("w ", 40)+`","max_output_tokens":16,"stream":true}`)
	checkEvents(t, evs)
	last := evs[len(evs)-1]
	if last.name != "response.incomplete" || last.data.Get("response.incomplete_details.reason").Str != "max_output_tokens" {
		t.Fatalf("last event %s", last.raw)
	}
	if item := evs[len(evs)-2].data.Get("item"); item.Get("status").Str != "incomplete" {
		t.Errorf("item %s", item.Raw)
	}
}

func TestStreamCut(t *testing.T) {
	e := newEnv(t, envOptions{})
	// The fake drops the connection after 4 chunks: the role chunk and 3
	// words, no finish reason.
	e.fault(fake.HeaderCutAfter, "4")
	_, evs := e.stream("alice", `{"model":"m","input":"one two three four five six","stream":true}`)
	checkEvents(t, evs)
	last := evs[len(evs)-1]
	if last.name != "response.failed" || last.data.Get("response.status").Str != "failed" ||
		last.data.Get("response.error.code").Str != "server_error" {
		t.Fatalf("last event %s", last.raw)
	}
	// What arrived before the cut is kept, marked incomplete.
	final := last.data.Get("response")
	if outputText(final) != "Echo: one two" || final.Get("output.0.status").Str != "incomplete" {
		t.Errorf("final %s", final.Raw)
	}
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+final.Get("id").Str, "")
	if status != 200 || gjson.GetBytes(body, "status").Str != "failed" {
		t.Errorf("GET: %d %s", status, body)
	}
}

// TestStreamClientDisconnect: a client that leaves mid-stream cancels the
// model call; the response is kept as far as it got, status incomplete,
// when it was to be stored (the client saw its id), and dropped otherwise.
func TestStreamClientDisconnect(t *testing.T) {
	for _, store := range []bool{true, false} {
		t.Run(fmt.Sprintf("store %v", store), func(t *testing.T) {
			e := newEnv(t, envOptions{fake: fake.Options{ChunkDelay: 20 * time.Millisecond}})
			e.fault(fake.HeaderChunks, "500")
			// A server of its own, to know when the handler is done.
			done := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(done)
				withCaller(e.svc.Handler()).ServeHTTP(w, r)
			}))
			defer srv.Close()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/responses",
				strings.NewReader(fmt.Sprintf(`{"model":"m","input":"long","stream":true,"store":%v}`, store)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(ownerHeader, "alice")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var id string
			var text strings.Builder
			for deltas := 0; deltas < 3 && sc.Scan(); {
				line := sc.Text()
				data, ok := strings.CutPrefix(line, "data: ")
				if ok && id == "" {
					id = gjson.Get(data, "response.id").Str
				}
				if ok && gjson.Get(data, "type").Str == "response.output_text.delta" {
					text.WriteString(gjson.Get(data, "delta").Str)
					deltas++
				}
			}
			cancel()

			// The upstream call is cancelled with the client's request.
			e.rec.mu.Lock()
			upstream := e.rec.ctxs[0]
			e.rec.mu.Unlock()
			select {
			case <-upstream.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("upstream call still running 5s after the client left")
			}
			<-done
			status, body := e.do("alice", http.MethodGet, "/v1/responses/"+id, "")
			if !store {
				if id == "" || status != 404 {
					t.Errorf("id %q: GET status %d, want 404", id, status)
				}
				return
			}
			got := gjson.ParseBytes(body)
			// The deltas the client read, and perhaps some it did not.
			if status != 200 || got.Get("status").Str != "incomplete" || got.Get("incomplete_details.reason").Str != "client_disconnected" ||
				got.Get("output.#").Int() != 1 || got.Get("output.0.status").Str != "incomplete" ||
				!strings.HasPrefix(outputText(got), text.String()) || text.Len() == 0 {
				t.Errorf("GET %d %s, want an incomplete response starting %q", status, body, text.String())
			}
		})
	}
}

func BenchmarkStreamDelta(b *testing.B) {
	w := &discard{h: http.Header{}}
	ev := newEventWriter(w)
	ev.start()
	raw := `" word"`
	b.ReportAllocs()
	for b.Loop() {
		ev.send("response.output_text.delta", func(d []byte) []byte {
			d = appendItemRef(d, "msg_0123456789abcdef0123456789abcdef0123456789abcdef", 0)
			d = append(d, `"content_index":0,"delta":`...)
			d = append(d, raw...)
			return append(d, `,"logprobs":[],`...)
		})
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// BenchmarkStreamChunk measures one upstream text chunk turned into one
// output_text.delta event.
func BenchmarkStreamChunk(b *testing.B) {
	req := &createRequest{stream: true}
	svc := &Service{}
	ru := &run{s: svc, req: req, obj: &responseObject{}, ev: newEventWriter(&discard{h: http.Header{}})}
	ru.ev.start()
	ru.textDelta(`"Echo:"`, "Echo:")
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if err := ru.onChunk(chunk); err != nil {
			b.Fatal(err)
		}
		ru.msg.cur.Reset()
		ru.stepText.Reset()
	}
}
