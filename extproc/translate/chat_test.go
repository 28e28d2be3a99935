package translate

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestChatRequestParse(t *testing.T) {
	body := `{"model":"m","x_first":1,"messages":[{"role":"user","content":"hi"}],"x_second":2,"stream":true,"n":1,"n":2}`
	var r ChatRequest
	if !r.Parse([]byte(body)) {
		t.Fatal("Parse refused an object")
	}
	if r.Model.Str != "m" || !r.Messages.IsArray() || r.Stream.Type.String() != "True" {
		t.Errorf("model %q, messages %s, stream %s", r.Model.Str, r.Messages.Raw, r.Stream.Raw)
	}
	if got := r.N.Int(); got != 2 {
		t.Errorf("duplicated n = %d, want the last (2)", got)
	}
	if r.UnknownKey != "x_first" || r.Unknown.Raw != "1" {
		t.Errorf("unknown = %q: %s, want the first one (x_first)", r.UnknownKey, r.Unknown.Raw)
	}
	// Index is the value's offset in the body.
	if at := strings.Index(body, `[{"role"`); r.Messages.Index != at {
		t.Errorf("messages at %d, want %d", r.Messages.Index, at)
	}
	if r.Tools.Exists() || Present(r.Tools) {
		t.Error("absent tools exist")
	}
	if r.Parse([]byte(`[1]`)) {
		t.Error("Parse accepted an array")
	}
}

// SetRaw, as a scanner that found the members calls it, gives the view Parse
// gives.
func TestChatRequestSetRaw(t *testing.T) {
	body := `{"model":"m", "messages":[{"role":"user","content":"h\u00e9"}],"stop":"\n","temperature":0.5,"odd":null}`
	var want, got ChatRequest
	want.Parse([]byte(body))
	for _, m := range []struct{ key, raw string }{
		{"model", `"m"`}, {"messages", `[{"role":"user","content":"h\u00e9"}]`}, {"stop", `"\n"`}, {"temperature", `0.5`}, {"odd", `null`},
	} {
		got.SetRaw(m.key, m.raw, strings.Index(body, m.raw))
	}
	same := func(a, b gjson.Result) bool {
		return a.Type == b.Type && a.Raw == b.Raw && a.Str == b.Str && a.Num == b.Num && a.Index == b.Index
	}
	if !same(got.Model, want.Model) || !same(got.Messages, want.Messages) || !same(got.Stop, want.Stop) ||
		!same(got.Temperature, want.Temperature) || got.UnknownKey != want.UnknownKey || !same(got.Unknown, want.Unknown) {
		t.Errorf("SetRaw view %+v\nParse view %+v", got, want)
	}
}
