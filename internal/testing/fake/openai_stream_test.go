package fake

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStream(t *testing.T) {
	srv := newServer(t, Options{})
	tests := []struct {
		name         string
		body         string
		headers      []string
		content      []string // want, per choice
		finish       string
		includeUsage bool
		usage        gotUsage
	}{{
		name:    "plain",
		body:    `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`,
		content: []string{"Echo: hello there"}, finish: "stop",
	}, {
		name:    "include_usage",
		body:    `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`,
		content: []string{"Echo: hello there"}, finish: "stop", includeUsage: true, usage: gotUsage{2, 3, 5},
	}, {
		name:    "include_usage false",
		body:    `{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`,
		content: []string{"Echo: hi"}, finish: "stop",
	}, {
		name:    "n=2 interleaved",
		body:    `{"model":"m","stream":true,"n":2,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a b"}]}`,
		content: []string{"Echo: a b", "(choice 1) Echo: a b"}, finish: "stop", includeUsage: true, usage: gotUsage{2, 3 + 5, 10},
	}, {
		name:    "max_tokens",
		body:    `{"model":"m","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"one two three"}]}`,
		content: []string{"Echo: one"}, finish: "length",
	}, {
		name:    "stop",
		body:    `{"model":"m","stream":true,"stop":["wo"],"messages":[{"role":"user","content":"one two three"}]}`,
		content: []string{"Echo: one t"}, finish: "stop",
	}, {
		name:    "x-fake-chunks",
		body:    `{"model":"m","stream":true,"messages":[{"role":"user","content":"one two three"}]}`,
		headers: []string{HeaderChunks, "40"},
		content: []string{"Echo: one two three " + strings.Join(append(filler, filler...)[:36], " ")}, finish: "stop",
	}, {
		name:    "x-fake-chunks zero",
		body:    `{"model":"m","stream":true,"messages":[{"role":"user","content":"one"}]}`,
		headers: []string{HeaderChunks, "0"},
		content: []string{""}, finish: "stop",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := readSSE(t, post(t, srv, tt.body, tt.headers...))
			if !s.clean {
				t.Fatalf("stream did not end cleanly: %v", s.err)
			}
			if len(s.data) == 0 || s.data[len(s.data)-1] != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %q", s.data)
			}
			chunks := s.chunks(t)
			first := chunks[0]
			if !strings.HasPrefix(first.ID, "chatcmpl-") || first.Created == 0 {
				t.Errorf("first chunk id %q created %d", first.ID, first.Created)
			}

			type state struct {
				role      bool
				content   strings.Builder
				finish    string
				nContent  int
				afterDone bool
			}
			states := make([]state, len(tt.content))
			var usage *gotUsage
			for i, c := range chunks {
				if c.ID != first.ID || c.Created != first.Created || c.Object != "chat.completion.chunk" || c.Model != "m" {
					t.Errorf("chunk %d envelope: %+v", i, c)
				}
				if usage != nil {
					t.Fatalf("chunk %d after the usage chunk", i)
				}
				switch {
				case !tt.includeUsage && c.Usage != nil:
					t.Errorf("chunk %d has usage %s without include_usage", i, c.Usage)
				case tt.includeUsage && len(c.Choices) > 0 && string(c.Usage) != "null":
					t.Errorf("chunk %d: usage %q, want null", i, c.Usage)
				case tt.includeUsage && len(c.Choices) == 0:
					usage = new(gotUsage)
					if err := json.Unmarshal(c.Usage, usage); err != nil {
						t.Fatalf("usage chunk %s: %v", s.data[i], err)
					}
					continue
				}
				if len(c.Choices) != 1 {
					t.Fatalf("chunk %d has %d choices", i, len(c.Choices))
				}
				ch := c.Choices[0]
				st := &states[ch.Index]
				if st.afterDone {
					t.Errorf("chunk %d: choice %d continues after its finish_reason", i, ch.Index)
				}
				if !st.role {
					if ch.Delta.Role != "assistant" || ch.Delta.Content == nil || *ch.Delta.Content != "" {
						t.Errorf("chunk %d: first delta of choice %d = %+v, want role assistant and empty content", i, ch.Index, ch.Delta)
					}
					st.role = true
				} else if ch.Delta.Role != "" {
					t.Errorf("chunk %d: role repeated", i)
				}
				if ch.Delta.Content != nil && *ch.Delta.Content != "" {
					st.nContent++
					st.content.WriteString(*ch.Delta.Content)
				}
				if ch.FinishReason != nil {
					st.finish = *ch.FinishReason
					st.afterDone = true
				}
			}
			for i := range states {
				if got := states[i].content.String(); got != tt.content[i] {
					t.Errorf("choice %d content %q, want %q", i, got, tt.content[i])
				}
				if n := len(strings.Fields(tt.content[i])); states[i].nContent != n {
					t.Errorf("choice %d: %d content chunks, want one per word (%d)", i, states[i].nContent, n)
				}
				if states[i].finish != tt.finish {
					t.Errorf("choice %d finish %q, want %q", i, states[i].finish, tt.finish)
				}
			}
			if tt.includeUsage != (usage != nil) {
				t.Fatalf("usage chunk present = %v, want %v", usage != nil, tt.includeUsage)
			}
			if usage != nil && *usage != tt.usage {
				t.Errorf("usage %+v, want %+v", *usage, tt.usage)
			}
		})
	}
}

func TestStreamToolCall(t *testing.T) {
	srv := newServer(t, Options{})
	body := `{"model":"m","n":2,` + weatherTools + `,"messages":[{"role":"user","content":"weather?"}]}`

	// The non-streaming reply is the reference for what the stream assembles to.
	var ref gotCompletion
	if err := json.Unmarshal(readBody(t, post(t, srv, body)), &ref); err != nil {
		t.Fatal(err)
	}

	s := readSSE(t, post(t, srv, strings.Replace(body, `{`, `{"stream":true,`, 1)))
	if !s.clean || s.data[len(s.data)-1] != "[DONE]" {
		t.Fatalf("stream did not end cleanly: %v %q", s.err, s.data)
	}
	type call struct {
		id, name, args string
		finish         string
		fragments      int
	}
	calls := make([]call, 2)
	for i, c := range s.chunks(t) {
		ch := c.Choices[0]
		st := &calls[ch.Index]
		if ch.FinishReason != nil {
			st.finish = *ch.FinishReason
			if len(ch.Delta.ToolCalls) != 0 || ch.Delta.Content != nil {
				t.Errorf("chunk %d: finish chunk has a delta %+v", i, ch.Delta)
			}
			continue
		}
		if len(ch.Delta.ToolCalls) != 1 {
			t.Fatalf("chunk %d: %d tool calls in delta", i, len(ch.Delta.ToolCalls))
		}
		tc := ch.Delta.ToolCalls[0]
		if tc.Index == nil || *tc.Index != 0 {
			t.Errorf("chunk %d: tool call index %v, want 0", i, tc.Index)
		}
		if st.id == "" {
			if ch.Delta.Role != "assistant" || tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
				t.Errorf("chunk %d: first tool delta %+v lacks role, id, type or name", i, ch.Delta)
			}
			st.id, st.name = tc.ID, tc.Function.Name
		} else if (tc.ID != "" && tc.ID != st.id) || tc.Function.Name != "" {
			t.Errorf("chunk %d: tool call id/name changed to %q/%q", i, tc.ID, tc.Function.Name)
		}
		if tc.Function.Arguments != nil {
			st.args += *tc.Function.Arguments
			if *tc.Function.Arguments != "" {
				st.fragments++
			}
		}
	}
	for i, st := range calls {
		want := ref.Choices[i].Message.ToolCalls[0]
		// The ids differ from the reference: they hash the request, which
		// here differs by "stream".
		if !strings.HasPrefix(st.id, "call_") || st.name != want.Function.Name || st.args != *want.Function.Arguments || st.finish != "tool_calls" {
			t.Errorf("choice %d streamed %+v, want %+v (%s) and finish tool_calls", i, st, want, *want.Function.Arguments)
		}
		if st.fragments < 2 {
			t.Errorf("choice %d: arguments came in %d fragments, want a few", i, st.fragments)
		}
	}
	if calls[0].id == calls[1].id {
		t.Errorf("choices share tool call id %s", calls[0].id)
	}
}
