package extproc

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

// embeddingsHeaders are the request headers of POST /v1/embeddings.
func embeddingsHeaders(key string) map[string]string {
	return map[string]string{":method": "POST", ":path": embeddingsPath, "authorization": "Bearer " + key,
		"content-type": "application/json", "accept-encoding": "gzip"}
}

func TestEmbeddingsValidation(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	m := `"model":"acme/embed"`
	obj := func(members ...string) string { return "{" + strings.Join(members, ",") + "}" }
	tests := []struct {
		name, body  string
		status      int
		code, param string
	}{
		{"invalid json", `{"model":`, 400, "invalid_json", ""},
		{"not an object", `"hi"`, 400, "invalid_type", ""},
		{"missing model", obj(`"input":"hi"`), 400, "missing_required_parameter", "model"},
		{"model not a string", obj(`"model":1`, `"input":"hi"`), 400, "invalid_type", "model"},
		{"duplicate model", obj(m, m, `"input":"hi"`), 400, "invalid_value", "model"},
		{"unknown model", obj(`"model":"acme/nope"`, `"input":"hi"`), 404, "model_not_found", "model"},
		{"chat model", obj(`"model":"acme/chat"`, `"input":"hi"`), 404, "model_not_supported", "model"},
		{"missing input", obj(m), 400, "missing_required_parameter", "input"},
		{"null input", obj(m, `"input":null`), 400, "missing_required_parameter", "input"},
		{"empty string", obj(m, `"input":""`), 400, "invalid_value", "input"},
		{"empty array", obj(m, `"input":[]`), 400, "invalid_value", "input"},
		{"number", obj(m, `"input":5`), 400, "invalid_type", "input"},
		{"object", obj(m, `"input":{"text":"hi"}`), 400, "invalid_type", "input"},
		{"array of objects", obj(m, `"input":[{}]`), 400, "invalid_type", "input[0]"},
		{"empty string item", obj(m, `"input":["a",""]`), 400, "invalid_value", "input"},
		{"mixed strings and ids", obj(m, `"input":["a",1]`), 400, "invalid_value", "input"},
		{"negative token", obj(m, `"input":[1,-2]`), 400, "invalid_value", "input"},
		{"fractional token", obj(m, `"input":[1,2.5]`), 400, "invalid_value", "input"},
		{"empty token array", obj(m, `"input":[[1],[]]`), 400, "invalid_value", "input"},
		{"mixed token arrays", obj(m, `"input":[[1],"a"]`), 400, "invalid_value", "input"},
		{"too many inputs", obj(m, `"input":[`+strings.Repeat(`"a",`, 2048)+`"a"]`), 400, "invalid_value", "input"},
		{"encoding_format", obj(m, `"input":"hi"`, `"encoding_format":"int8"`), 400, "invalid_value", "encoding_format"},
		{"encoding_format type", obj(m, `"input":"hi"`, `"encoding_format":1`), 400, "invalid_type", "encoding_format"},
		{"dimensions zero", obj(m, `"input":"hi"`, `"dimensions":0`), 400, "integer_below_min_value", "dimensions"},
		{"dimensions string", obj(m, `"input":"hi"`, `"dimensions":"8"`), 400, "invalid_type", "dimensions"},
		{"dimensions unsupported", obj(`"model":"acme/embed-small"`, `"input":"hi"`, `"dimensions":8`), 400, "unsupported_parameter", "dimensions"},
		{"user not a string", obj(m, `"input":"hi"`, `"user":7`), 400, "invalid_type", "user"},
		{"messages", obj(m, `"input":"hi"`, `"messages":[]`), 400, "unknown_parameter", "messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := h.open(t)
			e.do(reqHeadersMsg(headers(embeddingsHeaders(goodKey))))
			wantImmediate(t, e.do(reqBody(tt.body)), tt.status, tt.code, tt.param)
		})
	}

	valid := []struct{ name, body string }{
		{"string", obj(m, `"input":"hello"`)},
		{"strings", obj(m, `"input":["a","b"]`, `"encoding_format":"float"`)},
		{"token ids", obj(m, `"input":[1,2,3]`, `"encoding_format":"base64"`)},
		{"token arrays", obj(m, `"input":[[1,2],[3]]`, `"dimensions":8`, `"user":"u"`)},
		{"nulls", obj(`"model":"acme/embed-small"`, `"input":"x"`, `"dimensions":null`, `"encoding_format":null`, `"user":null`)},
		{"unknown members pass", obj(m, `"input":"x"`, `"extra":{"model":"no"}`)},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			e := h.open(t)
			e.do(reqHeadersMsg(headers(embeddingsHeaders(goodKey))))
			r := e.do(reqBody(tt.body))
			cr := common(r)
			if r.GetRequestBody() == nil || !cr.GetClearRouteCache() {
				t.Fatalf("rejected: %v", r)
			}
			set := setHeaders(cr.GetHeaderMutation())
			if set[catalog.RouteHeader] == "" || set[catalog.FirstHeader] != "local" || set[preparedHeader] != "local" {
				t.Errorf("route headers = %v", set)
			}
			// The first choice is OpenAI-kind: only the model is rewritten
			// for it; short inputs are not changed.
			want := prepared(prepared(tt.body, "acme/embed", "text-embedding-x"), "acme/embed-small", "small-embed")
			if got := string(cr.GetBodyMutation().GetBody()); got != want || set["content-length"] != strconv.Itoa(len(want)) {
				t.Errorf("body %s (content-length %s), want %s", got, set["content-length"], want)
			}
		})
	}

	t.Run("wrong method and no body", func(t *testing.T) {
		hs := headers(embeddingsHeaders(goodKey))
		hs[":method"] = "GET"
		r := h.open(t).do(reqHeadersMsg(hs))
		wantImmediate(t, r, 405, "", "")
		if !strings.Contains(string(r.GetImmediateResponse().GetBody()), embeddingsPath) {
			t.Errorf("message does not name the path: %s", r.GetImmediateResponse().GetBody())
		}
		hs[":method"] = "POST"
		wantImmediate(t, h.open(t).do(hs.request(true)), 400, "invalid_json", "")
	})

	t.Run("first choice never an Anthropic provider", func(t *testing.T) {
		h := newCatalogHarness(t, routingCatalog())
		h.srv.healthOf("local").coolDown(time.Now(), time.Minute)
		e := h.open(t)
		e.do(reqHeadersMsg(headers(embeddingsHeaders(goodKey))))
		set := setHeaders(common(e.do(reqBody(obj(m, `"input":"x"`)))).GetHeaderMutation())
		if set[catalog.FirstHeader] != "gem" {
			t.Errorf("first = %q, want gem (local cools down; claude cannot embed)", set[catalog.FirstHeader])
		}
	})
}

func TestEmbeddingsTruncation(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	cl, err := tokenizer.For(tokenizer.CL100KBase)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20) // far over 16 tokens
	escaped := strings.Repeat(`Caf\u00e9 \"quoted\" \\ and a tab\t. `, 10)
	ids := func(n int) string {
		var b strings.Builder
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(100 + i))
		}
		b.WriteByte(']')
		return b.String()
	}
	for _, tc := range []struct {
		name, model, input string
		// check the rewritten input (nil: body unchanged)
		check func(t *testing.T, in gjson.Result)
	}{
		{"short string untouched", "acme/embed", `"short text"`, nil},
		{"exactly context_window bytes untouched", "acme/embed", `"` + strings.Repeat("a", 16) + `"`, nil},
		{"long string cut to 16 tokens", "acme/embed", strconv.Quote(long), func(t *testing.T, in gjson.Result) {
			if n := cl.Count(in.Str); n != 16 || !strings.HasPrefix(long, in.Str) {
				t.Errorf("input %q: %d tokens", in.Str, n)
			}
		}},
		{"escapes survive", "acme/embed", `"` + escaped + `"`, func(t *testing.T, in gjson.Result) {
			var want string
			_ = json.Unmarshal([]byte(`"`+escaped+`"`), &want)
			if n := cl.Count(in.Str); n != 16 || !strings.HasPrefix(want, in.Str) {
				t.Errorf("input %q: %d tokens", in.Str, n)
			}
		}},
		{"only the long one of several", "acme/embed", `["short",` + strconv.Quote(long) + `,"also short"]`, func(t *testing.T, in gjson.Result) {
			if in.Get("0").Str != "short" || in.Get("2").Str != "also short" || cl.Count(in.Get("1").Str) != 16 {
				t.Errorf("inputs = %s", in.Raw)
			}
		}},
		{"token array", "acme/embed", ids(40), func(t *testing.T, in gjson.Result) {
			if in.Raw != ids(16) {
				t.Errorf("input = %s", in.Raw)
			}
		}},
		{"token arrays", "acme/embed", `[` + ids(3) + `,` + ids(17) + `]`, func(t *testing.T, in gjson.Result) {
			if in.Raw != `[`+ids(3)+`,`+ids(16)+`]` {
				t.Errorf("input = %s", in.Raw)
			}
		}},
		{"estimate tokenizer", "acme/embed-small", `"` + strings.Repeat("abcd", 20) + `"`, func(t *testing.T, in gjson.Result) {
			if in.Str != strings.Repeat("abcd", 8) {
				t.Errorf("input %q, want 32 bytes (8 tokens of 4 bytes)", in.Str)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"` + tc.model + `","input":` + tc.input + `,"user":"u"}`
			e := h.open(t)
			e.do(reqHeadersMsg(headers(embeddingsHeaders(goodKey))))
			r := e.do(reqBody(body))
			cr := common(r)
			if r.GetRequestBody() == nil {
				t.Fatalf("rejected: %v", r)
			}
			// The first choice is OpenAI-kind: the model is rewritten for
			// it in the same splice.
			upstream := map[string]string{"acme/embed": "text-embedding-x", "acme/embed-small": "small-embed"}[tc.model]
			bm := cr.GetBodyMutation()
			if tc.check == nil {
				if want := prepared(body, tc.model, upstream); string(bm.GetBody()) != want {
					t.Errorf("body %s, want %s", bm.GetBody(), want)
				}
				return
			}
			if bm == nil {
				t.Fatal("not truncated")
			}
			out := bm.GetBody()
			if !json.Valid(out) || setHeaders(cr.GetHeaderMutation())["content-length"] != strconv.Itoa(len(out)) {
				t.Fatalf("body %s with content-length %q", out, setHeaders(cr.GetHeaderMutation())["content-length"])
			}
			if gjson.GetBytes(out, "model").Str != upstream || gjson.GetBytes(out, "user").Str != "u" {
				t.Errorf("other members changed: %s", out)
			}
			tc.check(t, gjson.GetBytes(out, "input"))
		})
	}
}

func TestEmbeddingsEstimate(t *testing.T) {
	srv, _, _ := newTestServer(t, false)
	srv.getenv = routingEnv
	if err := srv.SetCatalog(routingCatalog()); err != nil {
		t.Fatal(err)
	}
	mr := srv.routes.Load().models["acme/embed"]
	for _, tc := range []struct {
		input string
		want  int64
	}{
		{`"abcd"`, 1},
		{`"abcde"`, 2},
		{`["a","b","c"]`, 3},
		{`[1,2,3,4,5]`, 5},
		{`[[1,2],[3]]`, 3},
		{`"` + strings.Repeat("word ", 100) + `"`, 16}, // truncated: at most the window
	} {
		body := []byte(`{"model":"acme/embed","input":` + tc.input + `}`)
		req, e := parseEmbeddings(body)
		if e != nil {
			t.Fatal(e)
		}
		st := newStream(srv)
		if _, got := st.truncateInputs(body, &req, mr); got != tc.want {
			t.Errorf("%s: estimate %d, want %d", tc.input, got, tc.want)
		}
	}
}
