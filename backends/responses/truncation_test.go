package responses

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// windowGateway answers GET /v1/models/{model} with a context window (0:
// 404), as the gateway does.
type windowGateway struct {
	window int
	paths  []string
}

func (g *windowGateway) Do(_ context.Context, _, _, method, path string, _ io.Reader) (*http.Response, error) {
	g.paths = append(g.paths, method+" "+path)
	if g.window == 0 {
		return &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader(`{"error":{"message":"no"}}`))}, nil
	}
	body := `{"id":"m","object":"model","context_window":` + strconv.Itoa(g.window) + `}`
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body))}, nil
}

func textItem(id, role, text string) []byte {
	b := []byte(`{"id":"` + id + `","type":"message","role":"` + role + `","content":[{"type":"`)
	if role == "assistant" {
		b = append(b, `output_text","text":`...)
	} else {
		b = append(b, `input_text","text":`...)
	}
	b = appendString(b, text)
	return append(b, `}],"status":"completed"}`...)
}

// TestTruncation: with truncation "auto" the oldest whole turns are left
// out until the context fits the model's window (by the larger of the
// gateway's byte estimate and the model's tokenizer), keeping the
// instructions, system messages and the last input; "disabled" and an
// unknown window send everything.
func TestTruncation(t *testing.T) {
	// 400 bytes: 100 tokens by the estimate, 103 with the message.
	long := strings.Repeat("abcd", 100)
	// cl100k_base: a token per " 7", twice the byte estimate.
	digits := strings.Repeat(" 7", 200)
	history := [][]byte{joinItems([][]byte{
		textItem("u1", "user", "first "+long),
		textItem("a1", "assistant", "answer one "+long),
		textItem("s1", "system", "stay"),
		textItem("u2", "user", "second "+long),
		[]byte(`{"id":"fc1","type":"function_call","call_id":"c1","name":"f","arguments":"{}","status":"completed"}`),
		[]byte(`{"id":"fo1","type":"function_call_output","call_id":"c1","output":"` + long + `","status":"completed"}`),
		textItem("a2", "assistant", "answer two"),
	})}
	for _, tc := range []struct {
		name, truncation, tokenizer string
		window                      int
		input                       string
		want                        string // the messages sent, by their first word
	}{
		{"fits", "auto", "", 100000, "third", "system:Be,user:first,assistant:answer,system:stay,user:second,assistant:,tool:abcdab,assistant:answer,user:third"},
		{"disabled", "disabled", "", 10, "third", "system:Be,user:first,assistant:answer,system:stay,user:second,assistant:,tool:abcdab,assistant:answer,user:third"},
		{"unknown window", "auto", "", 0, "third", "system:Be,user:first,assistant:answer,system:stay,user:second,assistant:,tool:abcdab,assistant:answer,user:third"},
		// Without the first turn: 6 (instructions) + 4 + 105 + 6 + 106 + 6 + 5 + 5 = 243.
		{"drops the oldest turn", "auto", "", 300, "third", "system:Be,system:stay,user:second,assistant:,tool:abcdab,assistant:answer,user:third"},
		// The second turn goes whole: the call with its output.
		{"drops a tool turn whole", "auto", "", 100, "third", "system:Be,system:stay,user:third"},
		{"keeps the last input", "auto", "", 5, "third", "system:Be,system:stay,user:third"},
		// By the estimate (100 + 3) the input alone fits 250 with the
		// first turn gone; by cl100k_base (200 tokens) it does not.
		{"estimate", "auto", "", 480, digits, "system:Be,system:stay,user:second,assistant:,tool:abcdab,assistant:answer,user:7"},
		{"tokenizer", "auto", "cl100k_base", 480, digits, "system:Be,system:stay,user:7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := &windowGateway{window: tc.window}
			s := &Service{gw: gw, log: slog.New(slog.DiscardHandler), tokenizers: map[string]string{"m": tc.tokenizer}}
			req := &createRequest{model: "m", truncation: tc.truncation, instructions: "Be brief.", hasInstr: true,
				input: [][]byte{textItem("u3", "user", tc.input)}}
			ru := &run{s: s, owner: "o", req: req, obj: &responseObject{ID: "resp_1"}}
			s.fillContext(t.Context(), ru, history)
			var got []string
			for _, m := range gjson.ParseBytes(ru.conv.appendMessages(nil)).Array() {
				first, _, _ := strings.Cut(strings.TrimSpace(m.Get("content").Str), " ")
				first = first[:min(len(first), 6)]
				got = append(got, m.Get("role").Str+":"+first)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("sent %s\nwant %s", strings.Join(got, ","), tc.want)
			}
			if tc.truncation == "auto" && (len(gw.paths) != 1 || gw.paths[0] != "GET /v1/models/m") {
				t.Errorf("gateway calls %v", gw.paths)
			}
		})
	}
}
