package gemini

import (
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"
)

func TestAppendCompactString(t *testing.T) {
	for _, raw := range []string{
		`{}`,
		"{\n  \"a\": 1,\n  \"b\": [1, 2, {\"c\": null}]\n}",
		`{"s": "with \"quotes\", a \\ backslash, a\nnewline, spaces  inside and \u00e9"}`,
		`{"nested": {"deep": [true, false, "x y"]}}`,
	} {
		out := appendCompactString(nil, raw)
		var s string
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("%s: %s is not a JSON string: %v", raw, out, err)
		}
		var got, want any
		if err := json.Unmarshal([]byte(s), &got); err != nil {
			t.Fatalf("%s: %q is not JSON: %v", raw, s, err)
		}
		_ = json.Unmarshal([]byte(raw), &want)
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%s: got %s", raw, s)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c == '\n' || c == '\t' {
				t.Errorf("%s: whitespace left outside strings: %q", raw, s)
				break
			}
		}
	}
	if got := string(appendCompactString(nil, `{ "a" : [ 1 , 2 ] }`)); got != `"{\"a\":[1,2]}"` {
		t.Errorf("got %s", got)
	}
}

func TestMimeFromName(t *testing.T) {
	for name, want := range map[string]string{
		"https://x/a.png":           "image/png",
		"https://x/a.JPG?v=1#frag":  "image/jpeg",
		"https://x/a.jpeg":          "image/jpeg",
		"https://x/a.webp":          "image/webp",
		"https://x/a.gif":           "image/gif",
		"https://x/a.heic":          "image/heic",
		"https://x/a.heif":          "image/heif",
		"gs://b/doc.pdf":            "application/pdf",
		"notes.txt":                 "text/plain",
		"a.wav":                     "audio/wav",
		"a.mp3":                     "audio/mp3",
		"a.mp4":                     "video/mp4",
		"https://x.y/path/noext":    "def",
		"https://x/a.unknown":       "def",
		"https://x.example.com/img": "def", // the dot is in the host
	} {
		if got := mimeFromName(name, "def"); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

func TestCanonicalStatus(t *testing.T) {
	for status, want := range map[int]string{
		400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
		409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
		502: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 422: "FAILED_PRECONDITION",
	} {
		if got := canonicalStatus(status); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
	// A bare status without a body's status name still maps.
	e := errorFrom(429, gjson.Parse(`{"code":429,"message":"slow"}`), "m")
	if e.Code != "rate_limit_exceeded" || e.Status != 429 {
		t.Errorf("got %+v", e)
	}
	e = errorFrom(0, gjson.Parse(`{"message":"?"}`), "m")
	if e.Status != 502 {
		t.Errorf("no status: got %+v", e)
	}
}

func TestRetrySeconds(t *testing.T) {
	for in, want := range map[string]int{"": 0, "37s": 37, "0.2s": 1, "1.5s": 2, "bogus": 0, "-3s": 0, "2m": 120} {
		if got := retrySeconds(in); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

// Escapes inside function arguments and odd model names survive.
func TestTranslateResponseEscapes(t *testing.T) {
	body := `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"say","args":{"text":"line1\nline \"2\" \u00e9 \\ end","n":[1, 2]}}}],"role":"model"},"finishReason":"STOP"}],"responseId":"esc"}`
	out, err := TranslateResponse(200, []byte(body), `model "quoted"`)
	if err != nil {
		t.Fatal(err)
	}
	conforms(t, "CreateChatCompletionResponse", out)
	var r struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct {
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	decode(t, out, &r)
	var args struct {
		Text string `json:"text"`
		N    []int  `json:"n"`
	}
	decode(t, []byte(r.Choices[0].Message.ToolCalls[0].Function.Arguments), &args)
	if r.Model != `model "quoted"` || args.Text != "line1\nline \"2\" é \\ end" || len(args.N) != 2 {
		t.Errorf("model %q args %+v", r.Model, args)
	}
}
