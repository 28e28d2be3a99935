package anthropic

import (
	"strings"
	"testing"
)

// TestCacheBreakpoints: where the automatic cache_control breakpoints go,
// with CacheMinTokens 40 (160 bytes) so that short texts can be long enough.
// The estimate counts the request's JSON, framing included.
func TestCacheBreakpoints(t *testing.T) {
	long := strings.Repeat("x", 200) // 50 tokens: over the minimum alone
	short := "hi"
	const cc = `"cache_control":{"type":"ephemeral"}`
	const mine = `"cache_control":{"type":"ephemeral","ttl":"1h"}`
	tool := func(name string) string {
		return `{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}`
	}
	tests := []struct {
		name string
		in   string // members after "model"
		opts Options
		want string // members after "max_tokens"
	}{
		{
			name: "short prompt: no breakpoint, system stays a string",
			in:   `"messages":[{"role":"system","content":"` + short + `"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]`,
			want: `"system":"` + short + `","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b"}]},{"role":"user","content":[{"type":"text","text":"c"}]}]`,
		},
		{
			name: "long system prompt, first turn: the system block only",
			in:   `"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"a"}]`,
			want: `"system":[{"type":"text","text":"` + long + `",` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]`,
		},
		{
			name: "later turn: system and the block before the newest user turn",
			in:   `"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]`,
			want: `"system":[{"type":"text","text":"` + long + `",` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b",` + cc + `}]},{"role":"user","content":[{"type":"text","text":"c"}]}]`,
		},
		{
			name: "short system, long conversation: only the conversation",
			in:   `"messages":[{"role":"system","content":"` + short + `"},{"role":"user","content":"` + long + `"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]`,
			want: `"system":"` + short + `","messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"}]},{"role":"assistant","content":[{"type":"text","text":"b",` + cc + `}]},{"role":"user","content":[{"type":"text","text":"c"}]}]`,
		},
		{
			name: "tool round: the breakpoint goes on the tool_use turn",
			in: `"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"r"}]`,
			want: `"messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"}]},{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":{},` + cc + `}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"r"}]}]`,
		},
		{
			name: "long tools: the last tool too",
			in:   `"tools":[` + tool("one_"+long) + `,` + tool("two") + `],"messages":[{"role":"user","content":"a"}]`,
			want: `"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"tools":[{"name":"one_` + long + `","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}},{"name":"two","input_schema":{"type":"object","properties":{"q":{"type":"string"}}},` + cc + `}]`,
		},
		{
			name: "off",
			in:   `"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]`,
			opts: Options{NoCacheControl: true, CacheMinTokens: 40},
			want: `"system":"` + long + `","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b"}]},{"role":"user","content":[{"type":"text","text":"c"}]}]`,
		},
		{
			name: "default minimum (1024 tokens): 200 bytes is not enough",
			in:   `"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"a"}]`,
			opts: Options{},
			want: `"system":"` + long + `","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]`,
		},
		{
			name: "client cache_control kept, not doubled",
			in: `"messages":[{"role":"system","content":[{"type":"text","text":"` + long + `","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
				{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}]},{"role":"user","content":"c"}]`,
			want: `"system":[{"type":"text","text":"` + long + `",` + mine + `}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b",` + mine + `}]},{"role":"user","content":[{"type":"text","text":"c"}]}]`,
		},
		{
			name: "four client breakpoints: none added",
			in: `"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":[
				{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}},
				{"type":"text","text":"c","cache_control":{"type":"ephemeral"}},{"type":"text","text":"d","cache_control":{"type":"ephemeral"}}]},
				{"role":"assistant","content":"e"},{"role":"user","content":"f"}]`,
			want: `"system":"` + long + `","messages":[{"role":"user","content":[{"type":"text","text":"a",` + cc + `},{"type":"text","text":"b",` + cc + `},{"type":"text","text":"c",` + cc + `},{"type":"text","text":"d",` + cc + `}]},{"role":"assistant","content":[{"type":"text","text":"e"}]},{"role":"user","content":[{"type":"text","text":"f"}]}]`,
		},
		{
			name: "three client breakpoints: only the most valuable one added",
			in: `"tools":[` + tool("t_"+long) + `],"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":[
				{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}},
				{"type":"text","text":"c","cache_control":{"type":"ephemeral"}}]},
				{"role":"assistant","content":"e"},{"role":"user","content":"f"}]`,
			want: `"system":[{"type":"text","text":"` + long + `",` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"a",` + cc + `},{"type":"text","text":"b",` + cc + `},{"type":"text","text":"c",` + cc + `}]},{"role":"assistant","content":[{"type":"text","text":"e"}]},{"role":"user","content":[{"type":"text","text":"f"}]}],"tools":[{"name":"t_` + long + `","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}]`,
		},
		{
			name: "client cache_control on an image part",
			in:   `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"},"cache_control":{"type":"ephemeral"}},{"type":"text","text":"what?"}]}]`,
			want: `"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"},` + cc + `},{"type":"text","text":"what?"}]}]`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts == (Options{}) && !strings.HasPrefix(tc.name, "default") {
				opts.CacheMinTokens = 40
			}
			out, err := TranslateRequest([]byte(`{"model":"m",`+tc.in+`}`), "claude-up", opts)
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, out, `{"model":"claude-up","max_tokens":4096,`+tc.want+`}`)
			if n := strings.Count(string(out), `"cache_control"`); n > maxBreakpoints {
				t.Errorf("%d breakpoints, Anthropic allows %d", n, maxBreakpoints)
			}
		})
	}
}
