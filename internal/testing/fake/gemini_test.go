package fake

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

const geminiKey = "AIza-test-key"

func geminiServer(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewGemini(opts))
	t.Cleanup(srv.Close)
	return srv
}

// geminiPost sends body to path on srv with the test key and the given
// headers (alternating names and values).
func geminiPost(t *testing.T, srv *httptest.Server, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-goog-api-key", geminiKey)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const (
	geminiGenerate = "/v1beta/models/gemini-fake:generateContent"
	geminiStream   = "/v1beta/models/gemini-fake:streamGenerateContent?alt=sse"
	geminiBatch    = "/v1beta/models/text-embedding-004:batchEmbedContents"
)

// geminiGot is a decoded GenerateContentResponse, for assertions.
type geminiGot struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         *string `json:"text"`
				FunctionCall *struct {
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
		Index        *int   `json:"index"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
		TotalTokenCount      int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
	ResponseID   string `json:"responseId"`
}

func (g *geminiGot) text(i int) string {
	var b strings.Builder
	for _, p := range g.Candidates[i].Content.Parts {
		if p.Text != nil {
			b.WriteString(*p.Text)
		}
	}
	return b.String()
}

func geminiOK(t *testing.T, resp *http.Response) geminiGot {
	t.Helper()
	b := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var g geminiGot
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return g
}

// geminiWantError checks a Gemini error answer: status, status name, and a
// part of the message.
func geminiWantError(t *testing.T, resp *http.Response, code int, status, msgPart string) geminiError {
	t.Helper()
	b := readBody(t, resp)
	if resp.StatusCode != code {
		t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, code, b)
	}
	var e struct {
		Error *struct {
			Code    int               `json:"code"`
			Message string            `json:"message"`
			Status  string            `json:"status"`
			Details []json.RawMessage `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	if e.Error.Code != code || e.Error.Status != status || !strings.Contains(e.Error.Message, msgPart) {
		t.Errorf("error = %d %s %q, want %d %s containing %q", e.Error.Code, e.Error.Status, e.Error.Message, code, status, msgPart)
	}
	var details []any
	for _, d := range e.Error.Details {
		var v any
		_ = json.Unmarshal(d, &v)
		details = append(details, v)
	}
	return geminiError{Code: e.Error.Code, Message: e.Error.Message, Status: e.Error.Status, Details: details}
}

const geminiWeatherTools = `"tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather.","parameters":{"type":"OBJECT","properties":{"city":{"type":"STRING"},"days":{"type":"INTEGER"},"metric":{"type":"BOOLEAN"}},"required":["city"]}},{"name":"get_time"}]}]`

func TestGeminiGenerate(t *testing.T) {
	srv := geminiServer(t, Options{APIKey: geminiKey})
	t.Run("text", func(t *testing.T) {
		resp := geminiPost(t, srv, geminiGenerate, `{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"role":"user","parts":[{"text":"hello there"}]}]}`)
		if ct := resp.Header.Get("content-type"); ct != "application/json; charset=UTF-8" {
			t.Errorf("content-type %q", ct)
		}
		g := geminiOK(t, resp)
		if len(g.Candidates) != 1 || g.text(0) != "Echo: hello there" || g.Candidates[0].Content.Role != "model" || g.Candidates[0].FinishReason != "STOP" {
			t.Fatalf("got %+v", g)
		}
		if g.Candidates[0].Index != nil {
			t.Errorf("index 0 is sent; Gemini leaves it out")
		}
		// Same counts as the OpenAI fake: 2 + 2 prompt words, 3 generated.
		if u := g.UsageMetadata; u == nil || u.PromptTokenCount != 4 || u.CandidatesTokenCount != 3 || u.TotalTokenCount != 7 {
			t.Errorf("usage %+v", g.UsageMetadata)
		}
		if g.ModelVersion != "gemini-fake" || g.ResponseID == "" {
			t.Errorf("modelVersion %q responseId %q", g.ModelVersion, g.ResponseID)
		}
	})
	t.Run("function call", func(t *testing.T) {
		g := geminiOK(t, geminiPost(t, srv, geminiGenerate, `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],`+geminiWeatherTools+`}`))
		parts := g.Candidates[0].Content.Parts
		if len(parts) != 1 || parts[0].FunctionCall == nil || parts[0].FunctionCall.Name != "get_weather" {
			t.Fatalf("parts %+v", parts)
		}
		var args bytes.Buffer
		if err := json.Compact(&args, parts[0].FunctionCall.Args); err != nil {
			t.Fatal(err)
		}
		if got := args.String(); got != `{"city":"sample","days":1,"metric":true}` {
			t.Errorf("args %s", got)
		}
		if g.Candidates[0].FinishReason != "STOP" || g.UsageMetadata.CandidatesTokenCount != 4 {
			t.Errorf("finish %q usage %+v", g.Candidates[0].FinishReason, g.UsageMetadata)
		}
	})
	t.Run("allowed function", func(t *testing.T) {
		g := geminiOK(t, geminiPost(t, srv, geminiGenerate, `{"contents":[{"role":"user","parts":[{"text":"time?"}]}],`+geminiWeatherTools+`,"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_time"]}}}`))
		if fc := g.Candidates[0].Content.Parts[0].FunctionCall; fc == nil || fc.Name != "get_time" || string(bytes.TrimSpace(fc.Args)) != `{}` {
			t.Errorf("call %+v", fc)
		}
	})
	t.Run("mode NONE", func(t *testing.T) {
		g := geminiOK(t, geminiPost(t, srv, geminiGenerate, `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],`+geminiWeatherTools+`,"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}}`))
		if g.text(0) != "Echo: hi" {
			t.Errorf("text %q", g.text(0))
		}
	})
	t.Run("after function responses", func(t *testing.T) {
		body := `{"contents":[{"role":"user","parts":[{"text":"both?"}]},` +
			`{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_time","args":{}}}]},` +
			`{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"content":"sunny"}}},{"functionResponse":{"name":"get_time","response":{"content":{"h":12}}}}]}],` + geminiWeatherTools + `}`
		g := geminiOK(t, geminiPost(t, srv, geminiGenerate, body))
		if got := g.text(0); got != `The tool returned: {"h":12}` {
			t.Errorf("text %q", got)
		}
	})
	t.Run("generation config", func(t *testing.T) {
		g := geminiOK(t, geminiPost(t, srv, geminiGenerate, `{"contents":[{"role":"user","parts":[{"text":"one two three four"}]}],"generationConfig":{"candidateCount":2,"maxOutputTokens":3,"stopSequences":["four"],"temperature":0.5,"topP":0.9,"seed":7,"responseMimeType":"text/plain"}}`))
		if len(g.Candidates) != 2 || *g.Candidates[1].Index != 1 {
			t.Fatalf("candidates %+v", g.Candidates)
		}
		if g.text(0) != "Echo: one two" || g.Candidates[0].FinishReason != "MAX_TOKENS" {
			t.Errorf("candidate 0: %q %s", g.text(0), g.Candidates[0].FinishReason)
		}
		if g.text(1) != "(choice 1) Echo:" || g.Candidates[1].FinishReason != "MAX_TOKENS" {
			t.Errorf("candidate 1: %q %s", g.text(1), g.Candidates[1].FinishReason)
		}
		g = geminiOK(t, geminiPost(t, srv, geminiGenerate, `{"contents":[{"role":"user","parts":[{"text":"one two three four"}]}],"generationConfig":{"stopSequences":["three"]}}`))
		if g.text(0) != "Echo: one two " || g.Candidates[0].FinishReason != "STOP" { // as the OpenAI fake cuts
			t.Errorf("stop: %q %s", g.text(0), g.Candidates[0].FinishReason)
		}
	})
	t.Run("media parts", func(t *testing.T) {
		g := geminiOK(t, geminiPost(t, srv, geminiGenerate, `{"contents":[{"role":"user","parts":[{"text":"what"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},{"fileData":{"mimeType":"application/pdf","fileUri":"https://x.test/a.pdf"}},{"text":"is it"}]}]}`))
		if g.text(0) != "Echo: what\nis it" {
			t.Errorf("text %q", g.text(0))
		}
	})
	t.Run("v1 and key query parameter", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/models/gemini-fake:generateContent?key="+geminiKey, strings.NewReader(`{"contents":[{"parts":[{"text":"hi"}]}]}`))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if g := geminiOK(t, resp); g.text(0) != "Echo: hi" {
			t.Errorf("text %q", g.text(0))
		}
	})
}

// The Gemini fake answers as the OpenAI fake does for the same
// conversation.
func TestGeminiMatchesOpenAI(t *testing.T) {
	gsrv := geminiServer(t, Options{})
	osrv := newServer(t, Options{})
	g := geminiOK(t, geminiPost(t, gsrv, geminiGenerate, `{"systemInstruction":{"parts":[{"text":"Be a fox."}]},"contents":[{"role":"user","parts":[{"text":"one"}]},{"role":"model","parts":[{"text":"two"}]},{"role":"user","parts":[{"text":"three four five"}]}]}`))
	resp := post(t, osrv, `{"model":"m","messages":[{"role":"system","content":"Be a fox."},{"role":"user","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"three four five"}]}`)
	var o gotCompletion
	if err := json.Unmarshal(readBody(t, resp), &o); err != nil {
		t.Fatal(err)
	}
	if g.text(0) != *o.Choices[0].Message.Content || g.UsageMetadata.PromptTokenCount != o.Usage.PromptTokens || g.UsageMetadata.CandidatesTokenCount != o.Usage.CompletionTokens {
		t.Errorf("gemini %q %+v; openai %q %+v", g.text(0), g.UsageMetadata, *o.Choices[0].Message.Content, o.Usage)
	}
}

// geminiReadSSE reads an alt=sse answer: the decoded events, and whether
// the stream ended cleanly, checking the CRLF framing Gemini uses.
func geminiReadSSE(t *testing.T, resp *http.Response) (events []geminiGot, clean bool) {
	t.Helper()
	if ct := resp.Header.Get("content-type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return events, err == io.EOF && line == ""
		}
		if line == "\r\n" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || !strings.HasSuffix(data, "\r\n") {
			t.Fatalf("unexpected line %q", line)
		}
		var g geminiGot
		if err := json.Unmarshal([]byte(strings.TrimSuffix(data, "\r\n")), &g); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		events = append(events, g)
	}
}

func TestGeminiStream(t *testing.T) {
	srv := geminiServer(t, Options{})
	t.Run("text", func(t *testing.T) {
		events, clean := geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"a b c"}]}]}`))
		if !clean || len(events) != 4 { // "Echo:", " a", " b", " c"
			t.Fatalf("%d events, clean %v", len(events), clean)
		}
		var text strings.Builder
		for i, ev := range events {
			text.WriteString(ev.text(0))
			last := i == len(events)-1
			if (ev.Candidates[0].FinishReason == "STOP") != last {
				t.Errorf("event %d: finishReason %q", i, ev.Candidates[0].FinishReason)
			}
			if ev.UsageMetadata == nil || ev.UsageMetadata.CandidatesTokenCount != i+1 || ev.UsageMetadata.PromptTokenCount != 3 {
				t.Errorf("event %d: usage %+v", i, ev.UsageMetadata)
			}
			if ev.ResponseID != events[0].ResponseID {
				t.Errorf("event %d: responseId changes", i)
			}
		}
		if text.String() != "Echo: a b c" {
			t.Errorf("text %q", text.String())
		}
	})
	t.Run("chunks header", func(t *testing.T) {
		events, _ := geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`, HeaderChunks, "25"))
		if len(events) != 25 {
			t.Errorf("%d events, want 25", len(events))
		}
		events, _ = geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`, HeaderChunks, "0"))
		if len(events) != 1 || events[0].Candidates[0].FinishReason != "STOP" || len(events[0].Candidates[0].Content.Parts) != 0 {
			t.Errorf("empty reply events %+v", events)
		}
	})
	t.Run("candidates", func(t *testing.T) {
		events, _ := geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"candidateCount":2}}`))
		// "Echo: x" is 2 words, "(choice 1) Echo: x" 4.
		if len(events) != 4 || len(events[0].Candidates) != 2 || len(events[3].Candidates) != 1 || *events[3].Candidates[0].Index != 1 {
			t.Fatalf("events %+v", events)
		}
		if events[1].Candidates[0].FinishReason != "STOP" || events[3].Candidates[0].FinishReason != "STOP" {
			t.Errorf("finish reasons: %+v", events)
		}
	})
	t.Run("function call", func(t *testing.T) {
		events, _ := geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"x"}]}],`+geminiWeatherTools+`}`))
		if len(events) != 1 || events[0].Candidates[0].Content.Parts[0].FunctionCall == nil || events[0].Candidates[0].FinishReason != "STOP" {
			t.Fatalf("events %+v", events)
		}
	})
	t.Run("JSON array without alt=sse", func(t *testing.T) {
		resp := geminiPost(t, srv, "/v1beta/models/gemini-fake:streamGenerateContent", `{"contents":[{"role":"user","parts":[{"text":"a b"}]}]}`)
		var events []geminiGot
		if err := json.Unmarshal(readBody(t, resp), &events); err != nil {
			t.Fatal(err)
		}
		if len(events) != 3 || events[2].Candidates[0].FinishReason != "STOP" {
			t.Errorf("events %+v", events)
		}
	})
	t.Run("cut", func(t *testing.T) {
		events, clean := geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"a b c d"}]}]}`, HeaderCutAfter, "2"))
		if clean || len(events) != 2 {
			t.Errorf("%d events, clean %v", len(events), clean)
		}
		events, clean = geminiReadSSE(t, geminiPost(t, srv, geminiStream, `{"contents":[{"role":"user","parts":[{"text":"a"}]}]}`, HeaderCutAfter, "100"))
		if !clean || len(events) != 2 {
			t.Errorf("%d events, clean %v", len(events), clean)
		}
	})
}

func TestGeminiEmbed(t *testing.T) {
	srv := geminiServer(t, Options{})
	type embeddings struct {
		Embeddings []struct {
			Values []float64 `json:"values"`
		} `json:"embeddings"`
		Embedding *struct {
			Values []float64 `json:"values"`
		} `json:"embedding"`
	}
	get := func(path, body string) embeddings {
		t.Helper()
		resp := geminiPost(t, srv, path, body)
		b := readBody(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var e embeddings
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	req := func(text, extra string) string {
		return `{"model":"models/text-embedding-004","content":{"parts":[{"text":"` + text + `"}]}` + extra + `}`
	}
	e := get(geminiBatch, `{"requests":[`+req("alpha", "")+`,`+req("beta", `,"taskType":"RETRIEVAL_QUERY"`)+`,`+req("alpha", "")+`]}`)
	if len(e.Embeddings) != 3 {
		t.Fatalf("%d embeddings", len(e.Embeddings))
	}
	for i, v := range e.Embeddings {
		if len(v.Values) != 768 {
			t.Errorf("vector %d: %d dims", i, len(v.Values))
		}
		norm := 0.0
		for _, x := range v.Values {
			norm += x * x
		}
		if math.Abs(norm-1) > 1e-4 {
			t.Errorf("vector %d: norm² %v", i, norm)
		}
	}
	if e.Embeddings[0].Values[5] != e.Embeddings[2].Values[5] || e.Embeddings[0].Values[5] == e.Embeddings[1].Values[5] {
		t.Errorf("vectors are not a function of the text")
	}
	e = get(geminiBatch, `{"requests":[`+req("alpha", `,"outputDimensionality":16`)+`]}`)
	if len(e.Embeddings[0].Values) != 16 {
		t.Errorf("outputDimensionality not honoured: %d", len(e.Embeddings[0].Values))
	}
	e = get("/v1beta/models/text-embedding-004:embedContent", `{"content":{"parts":[{"text":"alpha"}]},"outputDimensionality":8}`)
	if e.Embedding == nil || len(e.Embedding.Values) != 8 {
		t.Errorf("embedContent: %+v", e)
	}

	for _, tt := range []struct{ name, body, msg string }{
		{"model mismatch", `{"requests":[{"model":"models/other","content":{"parts":[{"text":"x"}]}}]}`, "does not match"},
		{"no requests", `{"requests":[]}`, "at least one"},
		{"too many", `{"requests":[` + strings.Repeat(req("x", "")+",", 100) + req("x", "") + `]}`, "at most 100"},
		{"dimensions", `{"requests":[` + req("x", `,"outputDimensionality":4000`) + `]}`, "output_dimensionality"},
		{"unknown field", `{"requests":[` + req("x", `,"dimensions":4`) + `]}`, "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			geminiWantError(t, geminiPost(t, srv, geminiBatch, tt.body), 400, "INVALID_ARGUMENT", tt.msg)
		})
	}
}

func TestGeminiAuth(t *testing.T) {
	srv := geminiServer(t, Options{APIKey: geminiKey})
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	t.Run("missing", func(t *testing.T) {
		resp, err := srv.Client().Post(srv.URL+geminiGenerate, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		geminiWantError(t, resp, 403, "PERMISSION_DENIED", "unregistered callers")
	})
	t.Run("wrong", func(t *testing.T) {
		e := geminiWantError(t, geminiPost(t, srv, geminiGenerate, body, "x-goog-api-key", "nope"), 400, "INVALID_ARGUMENT", "API key not valid")
		if d, _ := json.Marshal(e.Details); !bytes.Contains(d, []byte(`"reason":"API_KEY_INVALID"`)) {
			t.Errorf("details %s", d)
		}
	})
}

func TestGeminiFaults(t *testing.T) {
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	t.Run("status", func(t *testing.T) {
		srv := geminiServer(t, Options{})
		for _, tt := range []struct {
			status int
			name   string
		}{{400, "INVALID_ARGUMENT"}, {404, "NOT_FOUND"}, {500, "INTERNAL"}, {503, "UNAVAILABLE"}, {504, "DEADLINE_EXCEEDED"}, {418, "FAILED_PRECONDITION"}} {
			resp := geminiPost(t, srv, geminiGenerate, body, HeaderStatus, strconv.Itoa(tt.status))
			geminiWantError(t, resp, tt.status, tt.name, "Injected fault")
		}
	})
	t.Run("429 with retry", func(t *testing.T) {
		srv := geminiServer(t, Options{})
		resp := geminiPost(t, srv, geminiStream, body, HeaderStatus, "429", HeaderRetryAfter, "4")
		e := geminiWantError(t, resp, 429, "RESOURCE_EXHAUSTED", "Injected fault")
		if resp.Header.Get("retry-after") != "4" {
			t.Errorf("retry-after %q", resp.Header.Get("retry-after"))
		}
		if d, _ := json.Marshal(e.Details); !bytes.Contains(d, []byte(`"retryDelay":"4s"`)) {
			t.Errorf("details %s", d)
		}
	})
	t.Run("from options, on embeddings too", func(t *testing.T) {
		srv := geminiServer(t, Options{Fault: Fault{Status: 502}})
		geminiWantError(t, geminiPost(t, srv, geminiBatch, `{}`), 502, "INTERNAL", "Injected fault")
	})
	t.Run("malformed header", func(t *testing.T) {
		srv := geminiServer(t, Options{})
		geminiWantError(t, geminiPost(t, srv, geminiGenerate, body, HeaderStatus, "200"), 400, "INVALID_ARGUMENT", HeaderStatus)
	})
	t.Run("delay", func(t *testing.T) {
		srv := geminiServer(t, Options{})
		start := time.Now()
		geminiOK(t, geminiPost(t, srv, geminiGenerate, body, HeaderDelayMS, "60"))
		if d := time.Since(start); d < 60*time.Millisecond {
			t.Errorf("answered after %v", d)
		}
	})
	t.Run("bad option panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		NewGemini(Options{Fault: Fault{Status: 302}})
	})
}

// The fake refuses what Gemini refuses, so translators tested against it
// send only what Gemini accepts.
func TestGeminiRejects(t *testing.T) {
	srv := geminiServer(t, Options{})
	user := `{"role":"user","parts":[{"text":"x"}]}`
	tests := []struct{ name, body, msg string }{
		{"not JSON", `{"contents":`, "Invalid JSON payload"},
		{"unknown field", `{"contents":[` + user + `],"temperature":1}`, "unknown field"},
		{"unknown generation field", `{"contents":[` + user + `],"generationConfig":{"max_tokens":1}}`, "unknown field"},
		{"no contents", `{"contents":[]}`, "contents is not specified"},
		{"bad role", `{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}`, "valid role"},
		{"empty parts", `{"contents":[{"role":"user","parts":[]}]}`, "must not be empty"},
		{"empty text", `{"contents":[{"role":"user","parts":[{"text":""}]}]}`, "empty text"},
		{"two kinds in a part", `{"contents":[{"role":"user","parts":[{"text":"x","inlineData":{"mimeType":"image/png","data":"AA=="}}]}]}`, "oneof"},
		{"bad base64", `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"%%%"}}]}]}`, "Base64"},
		{"args not an object", `{"contents":[` + user + `,{"role":"model","parts":[{"functionCall":{"name":"f","args":"{}"}}]}]}`, "function_call.args"},
		{"response not an object", `{"contents":[` + user + `,{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":"ok"}}]}]}`, "function_response.response"},
		{"response count", `{"contents":[` + user + `,{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}},{"functionCall":{"name":"g","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, "number of function response parts"},
		{"response without call", `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, "immediately after a function call turn"},
		{"system image", `{"systemInstruction":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}}]},"contents":[` + user + `]}`, "only text"},
		{"object without properties", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{}}}]}]}`, "should be non-empty for OBJECT type"},
		{"JSON Schema keyword", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"STRING"}},"additionalProperties":false}}]}]}`, "additionalProperties"},
		{"bad type", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"text"}}}}]}]}`, "type"},
		{"bad format", `{"contents":[` + user + `],"generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"STRING","format":"email"}}}`, "format"},
		{"schema without JSON", `{"contents":[` + user + `],"generationConfig":{"responseSchema":{"type":"STRING"}}}`, "response_mime_type"},
		{"bad function name", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"my function"}]}]}`, "Invalid function name"},
		{"allowed names without ANY", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"AUTO","allowedFunctionNames":["f"]}}}`, "only allowed when mode is ANY"},
		{"undeclared allowed name", `{"contents":[` + user + `],"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["g"]}}}`, "not a declared function"},
		{"bad mode", `{"contents":[` + user + `],"toolConfig":{"functionCallingConfig":{"mode":"required"}}}`, "mode"},
		{"candidates", `{"contents":[` + user + `],"generationConfig":{"candidateCount":9}}`, "candidate_count"},
		{"stops", `{"contents":[` + user + `],"generationConfig":{"stopSequences":["a","b","c","d","e","f"]}}`, "stop_sequences"},
		{"temperature", `{"contents":[` + user + `],"generationConfig":{"temperature":3}}`, "temperature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			geminiWantError(t, geminiPost(t, srv, geminiGenerate, tt.body), 400, "INVALID_ARGUMENT", tt.msg)
		})
	}
	t.Run("unknown route", func(t *testing.T) {
		geminiWantError(t, geminiPost(t, srv, "/v1beta/models/x:countTokens", `{}`), 404, "NOT_FOUND", "not supported")
		geminiWantError(t, geminiPost(t, srv, "/v1/chat/completions", `{}`), 404, "NOT_FOUND", "not found")
	})
	t.Run("GET", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + geminiGenerate)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		geminiWantError(t, resp, 405, "INVALID_ARGUMENT", "not allowed")
	})
}

func BenchmarkGeminiGenerate(b *testing.B) {
	h := NewGemini(Options{})
	body := `{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"role":"user","parts":[{"text":"hello there, how are you today?"}]}]}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, geminiGenerate, strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
