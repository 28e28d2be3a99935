package extproc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
)

// TestSpliceInPlace holds the in-place splice to the copying one, for edits
// that grow, shrink and keep the length, in any mix, with and without room.
func TestSpliceInPlace(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 20000; iter++ {
		n := rnd.IntN(200)
		body := make([]byte, n, n+rnd.IntN(80))
		for i := range body {
			body[i] = byte('a' + rnd.IntN(26))
		}
		var edits []edit
		for pos := 0; pos <= n; {
			pos += rnd.IntN(max(n/3, 1))
			if pos > n {
				break
			}
			end := min(pos+rnd.IntN(20), n)
			if rnd.IntN(3) == 0 {
				end = pos // an insertion
			}
			edits = append(edits, edit{pos, end, bytes.Repeat([]byte{byte('A' + len(edits))}, rnd.IntN(30))})
			pos = end + rnd.IntN(2)
			if rnd.IntN(4) == 0 {
				break
			}
		}
		want := splice(body, edits)
		orig := string(body)
		got, ok := spliceInPlace(body, edits)
		if !ok {
			if len(want) <= cap(body) {
				t.Fatalf("refused with room: len %d cap %d, want %d", len(body), cap(body), len(want))
			}
			if string(body) != orig {
				t.Fatal("refused, but the body changed")
			}
			continue
		}
		if string(got) != string(want) {
			t.Fatalf("body %q edits %v:\nin place %q\ncopy     %q", orig, edits, got, want)
		}
		if &got[:1][0] != &body[:1][0] && len(got) > 0 {
			t.Fatal("not in place")
		}
	}
}

// TestRewriteEdits: the include_usage member goes in after the last member
// even when that is the model being rewritten, in place or not.
func TestRewriteEdits(t *testing.T) {
	srv, _, _ := newTestServer(t, true)
	for _, tc := range []struct{ name, body string }{
		{"model last", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"model":"openai/gpt-4o"}`},
		{"model first", `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"stream_options null after the model", `{"stream":true,"model":"openai/gpt-4o","stream_options":null,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`},
		{"escaped model", `{"stream":true,"model":"openai\/gpt-4o","messages":[{"role":"user","content":"hi"}]}`},
	} {
		for _, owned := range []bool{false, true} {
			st := newStream(srv)
			st.op, st.key, st.ownsBody = opChat, testKeys()[goodKey], owned
			body := append(make([]byte, 0, len(tc.body)+100), tc.body...)
			r := st.requestBody(t.Context(), &extprocv3.HttpBody{Body: body, EndOfStream: true})
			out := common(r).GetBodyMutation().GetBody()
			if !json.Valid(out) || gjson.GetBytes(out, "model").String() != "gpt-4o-2024-08-06" ||
				!gjson.GetBytes(out, "stream_options.include_usage").Bool() || setHeaders(common(r).GetHeaderMutation())["content-length"] != strconv.Itoa(len(out)) {
				t.Errorf("%s (in place %v): %s", tc.name, owned, out)
			}
			if inPlace := &out[0] == &body[0]; inPlace != owned {
				t.Errorf("%s: edited in place %v, owned %v", tc.name, inPlace, owned)
			}
		}
	}
}
