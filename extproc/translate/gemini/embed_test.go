package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"testing"
)

func TestTranslateEmbeddingRequest(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{
			name: "string",
			body: `{"model":"m","input":"hello \"world\""}`,
			want: `{"requests":[{"model":"models/text-embedding-004","content":{"parts":[{"text":"hello \"world\""}]}}]}`,
		},
		{
			name: "array with dimensions, order kept",
			body: `{"model":"m","input":["one","two","three"],"dimensions":256,"encoding_format":"base64","user":"u"}`,
			want: `{"requests":[` +
				`{"model":"models/text-embedding-004","content":{"parts":[{"text":"one"}]},"outputDimensionality":256},` +
				`{"model":"models/text-embedding-004","content":{"parts":[{"text":"two"}]},"outputDimensionality":256},` +
				`{"model":"models/text-embedding-004","content":{"parts":[{"text":"three"}]},"outputDimensionality":256}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TranslateEmbeddingRequest([]byte(tt.body), "text-embedding-004")
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, out, tt.want)
		})
	}

	for _, tt := range []struct {
		name, body, code, param string
	}{
		{"token array", `{"model":"m","input":[1,2,3]}`, "invalid_value", "input"},
		{"token arrays", `{"model":"m","input":[[1,2],[3]]}`, "invalid_value", "input"},
		{"empty array", `{"model":"m","input":[]}`, "invalid_value", "input"},
		{"missing input", `{"model":"m"}`, "missing_required_parameter", "input"},
		{"bad dimensions", `{"model":"m","input":"x","dimensions":0}`, "invalid_value", "dimensions"},
		{"fractional dimensions", `{"model":"m","input":"x","dimensions":1.5}`, "invalid_value", "dimensions"},
		{"bad format", `{"model":"m","input":"x","encoding_format":"int8"}`, "invalid_value", "encoding_format"},
		{"not JSON", `{`, "invalid_json", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := TranslateEmbeddingRequest([]byte(tt.body), "m")
			e := asAPIError(t, err)
			if e.Status != 400 || e.Code != tt.code || e.Param != tt.param {
				t.Errorf("got %d %q %q, want 400 %q %q", e.Status, e.Code, e.Param, tt.code, tt.param)
			}
		})
	}
}

func TestEstimateEmbeddingTokens(t *testing.T) {
	for body, want := range map[string]int{
		`{"input":"abcdefgh"}`:         2,
		`{"input":["abc","","abcde"]}`: 1 + 1 + 2,
		`{"input":"héllo"}`:            2, // 6 bytes of UTF-8
		`{"input":[1,2]}`:              2, // not translatable, but never 0 per input
		`{"model":"m"}`:                0,
	} {
		if got := EstimateEmbeddingTokens([]byte(body)); got != want {
			t.Errorf("%s: got %d, want %d", body, got, want)
		}
	}
}

func TestTranslateEmbeddingResponse(t *testing.T) {
	body := "{\n  \"embeddings\": [\n    {\n      \"values\": [\n        0.013168523,\n        -0.008711934,\n        1e-05\n      ]\n    },\n    {\n      \"values\": [\n        -0.5,\n        0.25,\n        3.4028235e+38\n      ]\n    }\n  ]\n}\n"
	floats, err := TranslateEmbeddingResponse(200, []byte(body), "client-embed", false, 7)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, floats, `{"object":"list","data":[
		{"object":"embedding","index":0,"embedding":[0.013168523,-0.008711934,1e-05]},
		{"object":"embedding","index":1,"embedding":[-0.5,0.25,3.4028235e+38]}],
		"model":"client-embed","usage":{"prompt_tokens":7,"total_tokens":7}}`)
	conforms(t, "CreateEmbeddingResponse", floats)

	b64, err := TranslateEmbeddingResponse(200, []byte(body), "client-embed", true, 7)
	if err != nil {
		t.Fatal(err)
	}
	var fl struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	var bs struct {
		Data []struct {
			Index     int    `json:"index"`
			Embedding string `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
	}
	decode(t, floats, &fl)
	decode(t, b64, &bs)
	if len(bs.Data) != len(fl.Data) || bs.Model != "client-embed" {
		t.Fatalf("base64 answer %s", b64)
	}
	for i, d := range bs.Data {
		if d.Index != i {
			t.Errorf("index %d at %d", d.Index, i)
		}
		raw, err := base64.StdEncoding.DecodeString(d.Embedding)
		if err != nil || len(raw) != 4*len(fl.Data[i].Embedding) {
			t.Fatalf("vector %d: %v, %d bytes", i, err, len(raw))
		}
		for k, f := range fl.Data[i].Embedding {
			got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:]))
			if got != float32(f) {
				t.Errorf("vector %d value %d: base64 %v, float %v", i, k, got, float32(f))
			}
		}
	}

	// embedContent's single answer.
	single, err := TranslateEmbeddingResponse(200, []byte(`{"embedding":{"values":[0.5,-0.5]}}`), "e", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, single, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.5]}],"model":"e","usage":{"prompt_tokens":1,"total_tokens":1}}`)

	for name, tt := range map[string]struct {
		status int
		body   string
		want   int
		code   string
	}{
		"upstream error": {429, `{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}`, 429, "rate_limit_exceeded"},
		"malformed":      {200, `{"embeddings":[{"values":"x"}]}`, 502, "upstream_invalid_response"},
		"wrong shape":    {200, `{"predictions":[]}`, 502, "upstream_invalid_response"},
		"non-numbers":    {200, `{"embeddings":[{"values":[1,"x"]}]}`, 502, "upstream_invalid_response"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := TranslateEmbeddingResponse(tt.status, []byte(tt.body), "e", false, 1)
			e := asAPIError(t, err)
			if e.Status != tt.want || e.Code != tt.code || string(out) != string(e.JSON()) {
				t.Errorf("got %d %q %s", e.Status, e.Code, out)
			}
			conforms(t, "ErrorResponse", out)
		})
	}
}
