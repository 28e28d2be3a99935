package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// newStallStack is a gateway in front of fakes that stall: before the
// response head (a fault delay that outlasts every test) or after two
// events, holding the connection until the gateway gives up, plus a
// healthy one (the stack's recorded upstream); the models have tiny
// first_byte_timeout and idle_timeout.
func newStallStack(t *testing.T) *stack {
	t.Helper()
	upstreams := []struct {
		name, kind string
		fault      fake.Fault
	}{
		// One per model that stalls before the head, so no test's timeouts
		// get another's provider ejected by outlier detection.
		{"head-stall", fake.KindOpenAI, fake.Fault{Delay: time.Hour}},
		{"head-stall-json", fake.KindOpenAI, fake.Fault{Delay: time.Hour}},
		{"head-stall-sse", fake.KindOpenAI, fake.Fault{Delay: time.Hour}},
		{"healthy", fake.KindOpenAI, fake.Fault{}},
		{"mid-openai", fake.KindOpenAI, fake.Fault{StallAfterChunks: 2}},
		{"mid-anthropic", fake.KindAnthropic, fake.Fault{StallAfterChunks: 2}},
		{"mid-gemini", fake.KindGemini, fake.Fault{StallAfterChunks: 2}},
	}
	var healthy *recorder
	var yaml strings.Builder
	yaml.WriteString("listeners:\n  - {name: public, address: 127.0.0.1:18080}\nproviders:\n")
	for _, u := range upstreams {
		env := "SWITCHYARD_E2E_" + strings.ToUpper(strings.ReplaceAll(u.name, "-", "_")) + "_KEY"
		cred := fmt.Sprintf("%s-%s-%d", u.name, strings.Repeat("k", 16), time.Now().UnixNano())
		t.Setenv(env, cred)
		h, err := fake.Handler(u.kind, fake.Options{APIKey: cred, Fault: u.fault})
		if err != nil {
			t.Fatal(err)
		}
		if u.name == "healthy" {
			healthy = &recorder{next: h}
			h = healthy
		}
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		base := up.URL
		if u.kind == fake.KindOpenAI {
			base += "/v1"
		}
		fmt.Fprintf(&yaml, "  - {name: %s, kind: %s, base_url: %q, api_key_env: %s}\n", u.name, u.kind, base, env)
	}
	// The first-byte timeouts leave a loaded machine time to answer; the
	// idle timeouts exceed them, as validation requires.
	yaml.WriteString(`models:
  - {id: stall/head-json, first_byte_timeout: 300ms, idle_timeout: 5s, providers: [{provider: head-stall-json, upstream_model: m}]}
  - {id: stall/head-sse, first_byte_timeout: 300ms, idle_timeout: 5s, providers: [{provider: head-stall-sse, upstream_model: m}]}
  - id: stall/failover
    first_byte_timeout: 1s
    idle_timeout: 5s
    providers: [{provider: head-stall, upstream_model: m}, {provider: healthy, upstream_model: m}]
  - {id: stall/healthy, providers: [{provider: healthy, upstream_model: m}]}
  - {id: stall/openai, first_byte_timeout: 1s, idle_timeout: 1500ms, providers: [{provider: mid-openai, upstream_model: m}]}
  - {id: stall/anthropic, first_byte_timeout: 1s, idle_timeout: 1500ms, providers: [{provider: mid-anthropic, upstream_model: claude-m}]}
  - {id: stall/gemini, first_byte_timeout: 1s, idle_timeout: 1500ms, providers: [{provider: mid-gemini, upstream_model: gemini-m}]}
`)
	cfg, err := config.Parse("e2e-stall.yaml", []byte(yaml.String()))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gw, err := gateway.Start(ctx, gateway.Options{
		Config:         cfg,
		DataDir:        t.TempDir(),
		Logger:         slog.New(jsonlog.NewHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ListenOverride: "127.0.0.1:0",
		RateLimitClock: fixedClock{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	key, _, err := gw.Keys.Issue(ctx, keys.Spec{Name: "e2e", Tier: "enterprise", RPM: 1_000_000, TPM: 1_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	return &stack{gw: gw, key: key, logs: logs, upstream: healthy}
}

// accessLine waits for the access log line of the request with id and
// returns it.
func (s *stack) accessLine(t *testing.T, id string) map[string]any {
	t.Helper()
	var line map[string]any
	waitFor(t, 10*time.Second, "the access log line of "+id, func() bool {
		for _, l := range strings.Split(s.logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "access" && m["request_id"] == id {
				line = m
				return true
			}
		}
		return false
	})
	return line
}

// TestStreamTimeouts: a provider that stalls before its response head is
// failed over (or answered with 504 in OpenAI's shape when none is left);
// one that stalls mid-stream ends the client's stream, after the model's
// idle_timeout, with an error event the SDK raises, and the access log marks
// the stream as cut.
func TestStreamTimeouts(t *testing.T) {
	s := newStallStack(t)
	c := s.client()
	ctx := context.Background()
	params := func(model string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three four five six")}}
	}

	t.Run("stall before the head fails over", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, params("stall/failover"))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; !strings.HasPrefix(got, "Echo: one two") || acc.Choices[0].FinishReason != "stop" {
			t.Errorf("content %q finish %q", got, acc.Choices[0].FinishReason)
		}
	})

	t.Run("stall before the head with no provider left is a 504", func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			var err error
			if stream {
				st := c.Chat.Completions.NewStreaming(ctx, params("stall/head-sse"))
				for st.Next() {
					t.Error("got a chunk")
				}
				err = st.Err()
			} else {
				_, err = c.Chat.Completions.New(ctx, params("stall/head-json"))
			}
			// Both attempts (the retry finds no other provider) timed out:
			// Envoy's URX, which the local reply mapper words.
			if e := apiError(t, err, http.StatusGatewayTimeout, "upstream_retry_limit_exceeded"); e.Type != "server_error" || e.Message == "" {
				t.Errorf("stream %v: error %+v", stream, e)
			}
		}
	})

	for _, model := range []string{"stall/openai", "stall/anthropic", "stall/gemini"} {
		t.Run("stall mid-stream on "+model, func(t *testing.T) {
			var resp *http.Response
			stream := c.Chat.Completions.NewStreaming(ctx, params(model), option.WithResponseInto(&resp))
			chunks := 0
			for stream.Next() {
				chunks++
			}
			err := stream.Err()
			var se *ssestream.StreamError
			if !errors.As(err, &se) || !strings.Contains(se.Message, "stream_idle_timeout") || string(se.Event.Type) != "error" {
				t.Fatalf("after %d chunks: err %v, want the SDK to raise the gateway's error event", chunks, err)
			}
			if chunks == 0 {
				t.Error("no chunk arrived before the stall")
			}
			var body struct {
				Error struct{ Message, Type, Code string }
			}
			if json.Unmarshal(se.Event.Data, &body) != nil || body.Error.Type != "server_error" || body.Error.Code != "stream_idle_timeout" {
				t.Errorf("error event %s", se.Event.Data)
			}
			line := s.accessLine(t, resp.Header.Get("x-request-id"))
			if line["level"] != "ERROR" || line["status"] != float64(200) || line["response_flags"] != "SI" ||
				line["response_detail"] != "stream_idle_timeout" {
				t.Errorf("access log line %v, want an ERROR with status 200, flag SI, detail stream_idle_timeout", line)
			}
		})
	}
}
