package fake

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

func TestSpecAvailable(t *testing.T) { schematest.RequireSpec(t) }

// conforms checks doc against the named OpenAI schema.
func conforms(t testing.TB, schema string, doc []byte) {
	t.Helper()
	schematest.Conforms(t, schema, doc)
}

func newServer(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewOpenAI(opts))
	t.Cleanup(srv.Close)
	return srv
}

// post sends body to the chat completions endpoint with the given headers
// (alternating names and values).
func post(t *testing.T, srv *httptest.Server, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
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

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b
}

// wantError checks an OpenAI error response: status, code, schema.
func wantError(t *testing.T, resp *http.Response, status int, code string) errorBody {
	t.Helper()
	b := readBody(t, resp)
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("content-type"); ct != "application/json" {
		t.Errorf("content-type = %q", ct)
	}
	conforms(t, "ErrorResponse", b)
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	if e.Error.Code == nil || *e.Error.Code != code {
		t.Errorf("code = %v, want %q; body %s", e.Error.Code, code, b)
	}
	return e
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// Decoded shapes, for assertions. They are deliberately separate from the
// fake's own wire types so a mistake in those shows up here.

type gotCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string    `json:"role"`
			Content   *string   `json:"content"`
			ToolCalls []gotCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage gotUsage `json:"usage"`
}

type gotCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type gotUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type gotChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string    `json:"role"`
			Content   *string   `json:"content"`
			ToolCalls []gotCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"` // absent, null, or the totals
}

// sse is a parsed event stream: the data payloads in order, and whether it
// ended cleanly (the body reached EOF without a transport error).
type sse struct {
	data  []string
	clean bool
	err   error
}

func readSSE(t *testing.T, resp *http.Response) sse {
	t.Helper()
	if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type = %q, want text/event-stream", ct)
	}
	var s sse
	r := bufio.NewReader(resp.Body)
	var event bytes.Buffer
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err != io.EOF || line != "" {
				s.err = err
			}
			s.clean = err == io.EOF && line == "" && event.Len() == 0
			return s
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if event.Len() > 0 {
				s.data = append(s.data, event.String())
				event.Reset()
			}
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		event.WriteString(data)
	}
}

// chunks decodes every event but a final [DONE], checking each against the
// stream chunk schema.
func (s sse) chunks(t *testing.T) []gotChunk {
	t.Helper()
	var out []gotChunk
	for i, d := range s.data {
		if d == "[DONE]" {
			if i != len(s.data)-1 {
				t.Fatalf("[DONE] at event %d of %d", i, len(s.data))
			}
			break
		}
		conforms(t, "CreateChatCompletionStreamResponse", []byte(d))
		var c gotChunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %d %s: %v", i, d, err)
		}
		out = append(out, c)
	}
	return out
}
