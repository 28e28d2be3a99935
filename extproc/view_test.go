package extproc

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
)

// The upstream phase's one scan fills the translators' view as their own
// parse of the body would.
func TestScanUpstreamBodyView(t *testing.T) {
	body := []byte(`{ "model" : "acme/chat", "mod\u0065l_hint": 1, "messages":[{"role":"user","content":"h\u00e9 \"x\""}],
		"tools":[{"type":"function","function":{"name":"f"}}], "stop":["a"], "temperature":0.25, "user":"u\n", "stream":false}`)
	var got, want translate.ChatRequest
	if _, ok := scanUpstreamBody(body, &got); !ok {
		t.Fatal("scan refused the body")
	}
	want.Parse(body)
	same := func(name string, a, b gjson.Result) {
		t.Helper()
		if a.Type != b.Type || a.Raw != b.Raw || a.Str != b.Str || a.Num != b.Num || a.Index != b.Index {
			t.Errorf("%s: scanned %+v, parsed %+v", name, a, b)
		}
	}
	same("model", got.Model, want.Model)
	same("messages", got.Messages, want.Messages)
	same("tools", got.Tools, want.Tools)
	same("stop", got.Stop, want.Stop)
	same("temperature", got.Temperature, want.Temperature)
	same("user", got.User, want.User)
	same("stream", got.Stream, want.Stream)
	same("unknown", got.Unknown, want.Unknown)
	if got.UnknownKey != "model_hint" || want.UnknownKey != got.UnknownKey {
		t.Errorf("unknown key: scanned %q, parsed %q", got.UnknownKey, want.UnknownKey)
	}
}
