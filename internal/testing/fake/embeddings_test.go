package fake

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// postTo sends body to path on srv with the given headers (alternating names
// and values).
func postTo(t *testing.T, srv *httptest.Server, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
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

// gotEmbeddings is the decoded embedding list; Embedding holds either form.
type gotEmbeddings struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens *int `json:"prompt_tokens"`
		TotalTokens  *int `json:"total_tokens"`
	} `json:"usage"`
}

// vectors returns every datum's vector as float32s, decoding the base64
// form when the embedding is a string.
func (g *gotEmbeddings) vectors(t *testing.T) [][]float32 {
	t.Helper()
	out := make([][]float32, len(g.Data))
	for i, d := range g.Data {
		if len(d.Embedding) > 0 && d.Embedding[0] == '"' {
			var s string
			if err := json.Unmarshal(d.Embedding, &s); err != nil {
				t.Fatal(err)
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(b)%4 != 0 {
				t.Fatalf("data[%d]: base64 %q: %v (%d bytes)", i, s, err, len(b))
			}
			v := make([]float32, len(b)/4)
			for j := range v {
				v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
			out[i] = v
			continue
		}
		// Each number must be the shortest decimal of a float32: read
		// as a float32 it is exact, and nothing shorter would read back
		// the same.
		var nums []json.Number
		if err := json.Unmarshal(d.Embedding, &nums); err != nil {
			t.Fatalf("data[%d]: %s: %v", i, d.Embedding, err)
		}
		v := make([]float32, len(nums))
		for j, n := range nums {
			f, err := strconv.ParseFloat(string(n), 32)
			if err != nil {
				t.Fatalf("data[%d][%d] = %s: %v", i, j, n, err)
			}
			v[j] = float32(f)
			if short, _ := json.Marshal(v[j]); string(short) != string(n) {
				t.Fatalf("data[%d][%d] = %s, not the float32's shortest form %s", i, j, n, short)
			}
		}
		out[i] = v
	}
	return out
}

// embed posts a valid embeddings request and decodes the answer, checking
// the request and (for float answers) the response against the spec.
func embed(t *testing.T, srv *httptest.Server, body string, headers ...string) *gotEmbeddings {
	t.Helper()
	conforms(t, "CreateEmbeddingRequest", []byte(body))
	resp := postTo(t, srv, "/v1/embeddings", body, headers...)
	b := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("content-type"); ct != "application/json" {
		t.Errorf("content-type = %q", ct)
	}
	if !strings.HasPrefix(resp.Header.Get("x-request-id"), "req_") {
		t.Errorf("x-request-id = %q", resp.Header.Get("x-request-id"))
	}
	var got gotEmbeddings
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !strings.Contains(body, `"base64"`) {
		conforms(t, "CreateEmbeddingResponse", b)
	} else {
		// The spec only describes the float form: check the rest of the
		// document with the vectors decoded in place.
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		for i, v := range got.vectors(t) {
			doc["data"].([]any)[i].(map[string]any)["embedding"] = v
		}
		decoded, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		conforms(t, "CreateEmbeddingResponse", decoded)
	}
	if got.Object != "list" || got.Usage.PromptTokens == nil || got.Usage.TotalTokens == nil {
		t.Fatalf("envelope %s", b)
	}
	for i, d := range got.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Errorf("data[%d]: object %q index %d", i, d.Object, d.Index)
		}
	}
	return &got
}

func norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func TestEmbeddings(t *testing.T) {
	srv := newServer(t, Options{})
	tests := []struct {
		name   string
		body   string
		n      int // inputs
		dims   int
		tokens int
	}{
		{name: "string", body: `{"model":"text-embedding-3-small","input":"The quick brown fox"}`, n: 1, dims: 1536, tokens: 4},
		{name: "whitespace counts 1", body: `{"model":"m","input":"   "}`, n: 1, dims: 1536, tokens: 1},
		{name: "array of strings", body: `{"model":"m","input":["alpha beta","gamma","delta epsilon zeta"]}`, n: 3, dims: 1536, tokens: 6},
		{name: "token ids", body: `{"model":"m","input":[15339,1917,0]}`, n: 1, dims: 1536, tokens: 3},
		{name: "arrays of token ids", body: `{"model":"m","input":[[15339,1917],[9906]]}`, n: 2, dims: 1536, tokens: 3},
		{name: "dimensions", body: `{"model":"text-embedding-3-large","input":"hi","dimensions":256}`, n: 1, dims: 256, tokens: 1},
		{name: "dimensions 1", body: `{"model":"m","input":"hi","dimensions":1}`, n: 1, dims: 1, tokens: 1},
		{name: "dimensions max", body: `{"model":"m","input":"hi","dimensions":3072}`, n: 1, dims: 3072, tokens: 1},
		{name: "explicit float, user ignored", body: `{"model":"m","input":"hi","encoding_format":"float","user":"u-1"}`, n: 1, dims: 1536, tokens: 1},
		{name: "base64", body: `{"model":"m","input":["a","b"],"encoding_format":"base64","dimensions":8}`, n: 2, dims: 8, tokens: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := embed(t, srv, tt.body)
			var req struct{ Model string }
			_ = json.Unmarshal([]byte(tt.body), &req)
			if got.Model != req.Model {
				t.Errorf("model = %q, want %q", got.Model, req.Model)
			}
			if *got.Usage.PromptTokens != tt.tokens || *got.Usage.TotalTokens != tt.tokens {
				t.Errorf("usage = %d/%d, want %d", *got.Usage.PromptTokens, *got.Usage.TotalTokens, tt.tokens)
			}
			vecs := got.vectors(t)
			if len(vecs) != tt.n {
				t.Fatalf("%d vectors, want %d", len(vecs), tt.n)
			}
			for i, v := range vecs {
				if len(v) != tt.dims {
					t.Errorf("vector %d has %d values, want %d", i, len(v), tt.dims)
				}
				if n := norm(v); math.Abs(n-1) > 1e-5 {
					t.Errorf("vector %d has norm %v", i, n)
				}
			}
		})
	}
}

// TestEmbeddingsDeterministic checks vectors depend on the text alone: the
// same text gives the same vector in any position and request, different
// inputs differ, and the vector is the Gemini fake's for the same text.
func TestEmbeddingsDeterministic(t *testing.T) {
	srv := newServer(t, Options{})
	a := embed(t, srv, `{"model":"m","input":["alpha","beta","alpha","hello world"]}`).vectors(t)
	b := embed(t, srv, `{"model":"other","input":"alpha"}`).vectors(t)
	c := embed(t, srv, `{"model":"m","input":["beta","alpha"]}`).vectors(t)
	same := func(x, y []float32) bool { return fmt.Sprint(x) == fmt.Sprint(y) }
	if !same(a[0], a[2]) || !same(a[0], b[0]) || !same(a[0], c[1]) || !same(a[1], c[0]) {
		t.Error("the same text gave different vectors")
	}
	if same(a[0], a[1]) || same(a[0], a[3]) {
		t.Error("different texts gave the same vector")
	}
	if !same(a[0], geminiVector("alpha", openAIEmbedDims)) {
		t.Error("vector differs from the Gemini fake's for the same text")
	}
	// Tokens are not text: [15339,1917] is "hello world" in cl100k_base,
	// but the fake does not tokenize, so it must not pretend to match.
	tok := embed(t, srv, `{"model":"m","input":[15339,1917]}`).vectors(t)
	toks := embed(t, srv, `{"model":"m","input":[[9906],[15339,1917]]}`).vectors(t)
	if !same(tok[0], toks[1]) || same(tok[0], toks[0]) || same(tok[0], a[3]) {
		t.Error("token-array vectors are not keyed by their ids")
	}
	// A smaller size is a different vector, deterministically.
	d1 := embed(t, srv, `{"model":"m","input":"alpha","dimensions":64}`).vectors(t)
	d2 := embed(t, srv, `{"model":"m","input":"alpha","dimensions":64}`).vectors(t)
	if !same(d1[0], d2[0]) || len(d1[0]) != 64 {
		t.Error("dimensions 64 is not deterministic")
	}
}

// TestEmbeddingsBase64 checks both encodings carry identical float32 values,
// in the same order.
func TestEmbeddingsBase64(t *testing.T) {
	srv := newServer(t, Options{})
	for _, input := range []string{`"one"`, `["one","two two","three"]`, `[[1,2],[3]]`} {
		for _, dims := range []string{``, `,"dimensions":5`} {
			t.Run(input+dims, func(t *testing.T) {
				floats := embed(t, srv, `{"model":"m","input":`+input+dims+`}`)
				b64 := embed(t, srv, `{"model":"m","input":`+input+dims+`,"encoding_format":"base64"}`)
				for i, d := range b64.Data {
					if d.Embedding[0] != '"' {
						t.Fatalf("base64 data[%d] is %.20s...", i, d.Embedding)
					}
				}
				fv, bv := floats.vectors(t), b64.vectors(t)
				if len(fv) != len(bv) {
					t.Fatalf("%d float vectors, %d base64", len(fv), len(bv))
				}
				for i := range fv {
					if len(fv[i]) != len(bv[i]) {
						t.Fatalf("vector %d: %d floats, %d from base64", i, len(fv[i]), len(bv[i]))
					}
					for j := range fv[i] {
						if math.Float32bits(fv[i][j]) != math.Float32bits(bv[i][j]) {
							t.Fatalf("vector %d value %d: float %v, base64 %v", i, j, fv[i][j], bv[i][j])
						}
					}
				}
				if *floats.Usage.PromptTokens != *b64.Usage.PromptTokens {
					t.Errorf("usage differs: %d vs %d", *floats.Usage.PromptTokens, *b64.Usage.PromptTokens)
				}
			})
		}
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	srv := newServer(t, Options{})
	many := `"x"` + strings.Repeat(`,"x"`, maxEmbedInputs)
	tests := []struct {
		name, body  string
		code, param string
	}{
		{name: "invalid JSON", body: `{"model":`, code: "invalid_json"},
		{name: "not an object", body: `["m"]`, code: "invalid_json"},
		{name: "missing model", body: `{"input":"hi"}`, code: "missing_required_parameter", param: "model"},
		{name: "model not a string", body: `{"model":5,"input":"hi"}`, code: "invalid_value", param: "model"},
		{name: "missing input", body: `{"model":"m"}`, code: "missing_required_parameter", param: "input"},
		{name: "null input", body: `{"model":"m","input":null}`, code: "missing_required_parameter", param: "input"},
		{name: "empty string", body: `{"model":"m","input":""}`, code: "invalid_value", param: "input"},
		{name: "empty array", body: `{"model":"m","input":[]}`, code: "invalid_value", param: "input"},
		{name: "empty string item", body: `{"model":"m","input":["a",""]}`, code: "invalid_value", param: "input"},
		{name: "empty token array", body: `{"model":"m","input":[[1],[]]}`, code: "invalid_value", param: "input"},
		{name: "mixed strings and ids", body: `{"model":"m","input":["a",1]}`, code: "invalid_value", param: "input"},
		{name: "mixed ids and strings", body: `{"model":"m","input":[1,"2"]}`, code: "invalid_value", param: "input"},
		{name: "mixed arrays and ids", body: `{"model":"m","input":[[1],2]}`, code: "invalid_value", param: "input"},
		{name: "negative id", body: `{"model":"m","input":[1,-2]}`, code: "invalid_value", param: "input"},
		{name: "fractional id", body: `{"model":"m","input":[[1.5]]}`, code: "invalid_value", param: "input"},
		{name: "null item", body: `{"model":"m","input":[null]}`, code: "invalid_value", param: "input"},
		{name: "object input", body: `{"model":"m","input":{"text":"hi"}}`, code: "invalid_value", param: "input"},
		{name: "number input", body: `{"model":"m","input":5}`, code: "invalid_value", param: "input"},
		{name: "too many inputs", body: `{"model":"m","input":[` + many + `]}`, code: "invalid_value", param: "input"},
		{name: "unknown encoding_format", body: `{"model":"m","input":"hi","encoding_format":"int8"}`, code: "invalid_value", param: "encoding_format"},
		{name: "encoding_format not a string", body: `{"model":"m","input":"hi","encoding_format":1}`, code: "invalid_value", param: "encoding_format"},
		{name: "dimensions 0", body: `{"model":"m","input":"hi","dimensions":0}`, code: "invalid_value", param: "dimensions"},
		{name: "dimensions negative", body: `{"model":"m","input":"hi","dimensions":-8}`, code: "invalid_value", param: "dimensions"},
		{name: "dimensions too large", body: `{"model":"m","input":"hi","dimensions":3073}`, code: "invalid_value", param: "dimensions"},
		{name: "dimensions fractional", body: `{"model":"m","input":"hi","dimensions":1.5}`, code: "invalid_value", param: "dimensions"},
		{name: "dimensions a string", body: `{"model":"m","input":"hi","dimensions":"8"}`, code: "invalid_value", param: "dimensions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := wantError(t, postTo(t, srv, "/v1/embeddings", tt.body), http.StatusBadRequest, tt.code)
			switch {
			case tt.param == "" && e.Error.Param != nil:
				t.Errorf("param = %q, want null", *e.Error.Param)
			case tt.param != "" && (e.Error.Param == nil || *e.Error.Param != tt.param):
				t.Errorf("param = %v, want %q (message %q)", e.Error.Param, tt.param, e.Error.Message)
			}
			if e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
				t.Errorf("error %+v", e.Error)
			}
		})
	}
}

// TestEmbeddingsRouting checks the endpoint shares the chat endpoint's path
// aliases, method check, auth and fault injection.
func TestEmbeddingsRouting(t *testing.T) {
	const body = `{"model":"m","input":"hi"}`
	srv := newServer(t, Options{APIKey: "sk-embed-key"})
	auth := []string{"authorization", "Bearer sk-embed-key"}

	t.Run("without /v1", func(t *testing.T) {
		resp := postTo(t, srv, "/embeddings", body, auth...)
		if b := readBody(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	})
	t.Run("missing key", func(t *testing.T) {
		wantError(t, postTo(t, srv, "/v1/embeddings", body), http.StatusUnauthorized, "invalid_api_key")
	})
	t.Run("wrong key", func(t *testing.T) {
		wantError(t, postTo(t, srv, "/v1/embeddings", body, "authorization", "Bearer sk-wrong-key"), http.StatusUnauthorized, "invalid_api_key")
	})
	t.Run("auth before body checks", func(t *testing.T) {
		wantError(t, postTo(t, srv, "/v1/embeddings", `{}`), http.StatusUnauthorized, "invalid_api_key")
	})
	t.Run("GET", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/embeddings", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		wantError(t, resp, http.StatusMethodNotAllowed, "method_not_allowed")
		if resp.Header.Get("allow") != http.MethodPost {
			t.Errorf("allow = %q", resp.Header.Get("allow"))
		}
	})
	t.Run("injected status", func(t *testing.T) {
		resp := postTo(t, srv, "/v1/embeddings", `not json`, append(auth, HeaderStatus, "429", HeaderRetryAfter, "3")...)
		e := wantError(t, resp, http.StatusTooManyRequests, "fake_fault")
		if e.Error.Type != "requests" || resp.Header.Get("retry-after") != "3" {
			t.Errorf("type %q retry-after %q", e.Error.Type, resp.Header.Get("retry-after"))
		}
	})
	t.Run("status from options", func(t *testing.T) {
		srv := newServer(t, Options{Fault: Fault{Status: 503}})
		wantError(t, postTo(t, srv, "/v1/embeddings", body), http.StatusServiceUnavailable, "fake_fault")
	})
	t.Run("bad fault header", func(t *testing.T) {
		wantError(t, postTo(t, srv, "/v1/embeddings", body, HeaderStatus, "oops"), http.StatusBadRequest, "invalid_value")
	})
	t.Run("delay", func(t *testing.T) {
		start := time.Now()
		resp := postTo(t, srv, "/v1/embeddings", body, append(auth, HeaderDelayMS, "60")...)
		readBody(t, resp)
		if resp.StatusCode != http.StatusOK || time.Since(start) < 60*time.Millisecond {
			t.Errorf("status %d after %v, want 200 after >= 60ms", resp.StatusCode, time.Since(start))
		}
	})
	t.Run("stream-only headers ignored", func(t *testing.T) {
		resp := postTo(t, srv, "/v1/embeddings", body, append(auth, HeaderCutAfter, "0", HeaderChunks, "3")...)
		if b := readBody(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	})
}

// TestSDKEmbeddings checks the official SDK against the endpoint, in both
// encodings: it must decode base64 to exactly the floats of the float form.
func TestSDKEmbeddings(t *testing.T) {
	client := sdkClient(t, Options{APIKey: "sk-sdk"})
	inputs := []openai.EmbeddingNewParamsInputUnion{
		{OfString: openai.String("hello sdk")},
		{OfArrayOfStrings: []string{"first input", "second", "first input"}},
		{OfArrayOfTokens: []int64{15339, 1917}},
		{OfArrayOfTokenArrays: [][]int64{{1, 2, 3}, {4}}},
	}
	wantTokens := []int64{2, 5, 2, 4}
	wantN := []int{1, 3, 1, 2}
	for i, input := range inputs {
		for _, dims := range []int64{0, 64} {
			t.Run(fmt.Sprintf("input %d dims %d", i, dims), func(t *testing.T) {
				get := func(format openai.EmbeddingNewParamsEncodingFormat) *openai.CreateEmbeddingResponse {
					t.Helper()
					params := openai.EmbeddingNewParams{
						Model:          openai.EmbeddingModelTextEmbedding3Small,
						Input:          input,
						EncodingFormat: format,
					}
					if dims > 0 {
						params.Dimensions = openai.Int(dims)
					}
					resp, err := client.Embeddings.New(t.Context(), params)
					if err != nil {
						t.Fatal(err)
					}
					return resp
				}
				floats := get(openai.EmbeddingNewParamsEncodingFormatFloat)
				b64 := get(openai.EmbeddingNewParamsEncodingFormatBase64)
				if !strings.Contains(b64.RawJSON(), `"embedding":"`) {
					t.Fatalf("base64 request got %.80s...", b64.RawJSON())
				}
				wantDims := 1536
				if dims > 0 {
					wantDims = int(dims)
				}
				for _, r := range []*openai.CreateEmbeddingResponse{floats, b64} {
					if r.Model != openai.EmbeddingModelTextEmbedding3Small || r.Usage.PromptTokens != wantTokens[i] || r.Usage.TotalTokens != wantTokens[i] {
						t.Errorf("model %q usage %+v, want %d tokens", r.Model, r.Usage, wantTokens[i])
					}
					if len(r.Data) != wantN[i] {
						t.Fatalf("%d embeddings, want %d", len(r.Data), wantN[i])
					}
				}
				for j := range floats.Data {
					f, b := floats.Data[j], b64.Data[j]
					if f.Index != int64(j) || b.Index != int64(j) || len(f.Embedding) != wantDims || len(b.Embedding) != wantDims {
						t.Fatalf("embedding %d: index %d/%d, %d/%d values", j, f.Index, b.Index, len(f.Embedding), len(b.Embedding))
					}
					// The SDK parses the float form's decimals as float64
					// and widens the base64 float32s: the values are the
					// same float32s, so they agree once narrowed, and the
					// base64 ones are exactly float32s.
					for k := range f.Embedding {
						fv, bv := f.Embedding[k], b.Embedding[k]
						if float32(fv) != float32(bv) || float64(float32(bv)) != bv {
							t.Fatalf("embedding %d value %d: float %v, base64 %v", j, k, fv, bv)
						}
					}
				}
			})
		}
	}
}

func BenchmarkEmbeddings(b *testing.B) {
	h := NewOpenAI(Options{})
	for _, format := range []string{"float", "base64"} {
		body := `{"model":"m","encoding_format":"` + format + `","input":["` + strings.Repeat("a few words of text ", 20) + `"]}`
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/embeddings", strings.NewReader(body)))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
