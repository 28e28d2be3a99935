package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// TestResponseFormatTypeValidated: a response format outside the spec
// (text, json_object, json_schema) is the client's error, 400 naming
// response_format.type (text.format.type on /v1/responses), whichever kind
// of vendor serves the model, and reaches no vendor.
func TestResponseFormatTypeValidated(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	sent := func() int {
		n := 0
		for _, r := range vs.fakes {
			n += len(r.all())
		}
		return n
	}
	before := sent()
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini", "vendor/failover"} {
		for _, tc := range []struct {
			name, code, param string
			set               option.RequestOption
		}{
			{"unknown type", "invalid_value", "response_format.type", option.WithJSONSet("response_format.type", "yaml")},
			{"type not a string", "invalid_type", "response_format.type", option.WithJSONSet("response_format.type", 5)},
			{"no type", "missing_required_parameter", "response_format.type", option.WithJSONSet("response_format", map[string]any{})},
			{"not an object", "invalid_type", "response_format", option.WithJSONSet("response_format", "json")},
		} {
			t.Run(model+"/chat/"+tc.name, func(t *testing.T) {
				p := chatParamsFor(model, "hi")
				p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}
				_, err := c.Chat.Completions.New(ctx, p, tc.set)
				if e := apiError(t, err, 400, tc.code); e != nil && e.Param != tc.param {
					t.Errorf("param %q, want %q (%s)", e.Param, tc.param, e.Message)
				}
				s := c.Chat.Completions.NewStreaming(ctx, p, tc.set)
				for s.Next() {
				}
				if e := apiError(t, s.Err(), 400, tc.code); e != nil && e.Param != tc.param {
					t.Errorf("streaming: param %q, want %q (%s)", e.Param, tc.param, e.Message)
				}
			})
		}
		if model == "vendor/failover" {
			continue
		}
		t.Run(model+"/responses", func(t *testing.T) {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}},
				option.WithJSONSet("text", map[string]any{"format": map[string]any{"type": "yaml"}}))
			if e := apiError(t, err, 400, "invalid_value"); e != nil && e.Param != "text.format.type" {
				t.Errorf("param %q (%s)", e.Param, e.Message)
			}
		})
	}
	if n := sent() - before; n != 0 {
		t.Errorf("%d invalid requests reached a vendor", n)
	}
}

// TestContentEncodingRefused: the gateway reads request bodies as sent, so
// a compressed one is refused with 415 saying why, rather than reported as
// invalid JSON, on every route that takes a body; identity is no encoding.
func TestContentEncodingRefused(t *testing.T) {
	s := newStack(t, stackOptions{})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`))
	_ = zw.Close()
	for _, tc := range []struct {
		name, path, encoding string
		body                 []byte
		status               int
	}{
		{"chat gzip", "/v1/chat/completions", "gzip", gz.Bytes(), 415},
		{"chat br", "/v1/chat/completions", "br", gz.Bytes(), 415},
		{"embeddings deflate", "/v1/embeddings", "deflate", gz.Bytes(), 415},
		{"responses gzip", "/v1/responses", "gzip", gz.Bytes(), 415},
		{"batches gzip", "/v1/batches", "gzip", gz.Bytes(), 415},
		{"chat identity", "/v1/chat/completions", "Identity", []byte(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, s.gw.BaseURL()+strings.TrimPrefix(tc.path, "/v1"), bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("content-type", "application/json")
			req.Header.Set("content-encoding", tc.encoding)
			req.Header.Set("authorization", "Bearer "+s.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.status == 415 {
				e := gjson.GetBytes(b, "error")
				if e.Get("code").String() != "unsupported_content_encoding" || !strings.Contains(e.Get("message").String(), "Content-Encoding") ||
					e.Get("type").String() != "invalid_request_error" {
					t.Errorf("error %s", b)
				}
			}
		})
	}
}

// TestResponseModelIsTheRequestedID: whichever provider kind answers, and
// whatever it calls the model, the response's model is the id the client
// asked for (the one /v1/models lists), streamed and not, on chat and
// embeddings, failover included.
func TestResponseModelIsTheRequestedID(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini", "vendor/failover"} {
		t.Run(model, func(t *testing.T) {
			res, err := c.Chat.Completions.New(ctx, chatParamsFor(model, "hello"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Model != model {
				t.Errorf("chat model %q, want %q", res.Model, model)
			}
			for _, usage := range []bool{false, true} {
				p := chatParamsFor(model, "a few words to stream back")
				if usage {
					p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				}
				s := c.Chat.Completions.NewStreaming(ctx, p)
				n := 0
				for s.Next() {
					n++
					if got := s.Current().Model; got != model {
						t.Errorf("include_usage %v: chunk %d model %q, want %q", usage, n, got, model)
					}
				}
				if err := s.Err(); err != nil || n < 3 {
					t.Fatalf("stream: %d chunks, %v", n, err)
				}
			}
		})
	}
	for _, model := range []string{"vendor/embed", "vendor/gemini-embed"} {
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model,
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("embed me")}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != model {
			t.Errorf("embeddings model %q, want %q", res.Model, model)
		}
	}
}
