package responses

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestParseConversation: the conversation parameter's shapes, and its
// refusal beside previous_response_id.
func TestParseConversation(t *testing.T) {
	ids := func(p string) string { return p + "x" }
	for _, tc := range []struct {
		name, body  string
		want        string // the parsed id, when accepted
		code, param string // the 400, when refused
	}{
		{"an id", `{"model":"m","input":"x","conversation":"conv_1"}`, "conv_1", "", ""},
		{"an object", `{"model":"m","input":"x","conversation":{"id":"conv_2"}}`, "conv_2", "", ""},
		{"null", `{"model":"m","input":"x","conversation":null}`, "", "", ""},
		{"a number", `{"model":"m","input":"x","conversation":7}`, "", "invalid_type", "conversation"},
		{"empty", `{"model":"m","input":"x","conversation":""}`, "", "invalid_value", "conversation"},
		{"an object without id", `{"model":"m","input":"x","conversation":{}}`, "", "missing_required_parameter", "conversation.id"},
		{"an object with a number id", `{"model":"m","input":"x","conversation":{"id":1}}`, "", "invalid_type", "conversation.id"},
		{"with previous_response_id", `{"model":"m","input":"x","conversation":"conv_1","previous_response_id":"resp_1"}`, "",
			"mutually_exclusive_parameters", "conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, aerr := parseCreate([]byte(tc.body), ids, false)
			if tc.code != "" {
				if aerr == nil || aerr.Status != 400 || aerr.Code != tc.code || aerr.Param != tc.param {
					t.Fatalf("got %+v, want 400 %s %s", aerr, tc.code, tc.param)
				}
				return
			}
			if aerr != nil || req.conversation != tc.want {
				t.Fatalf("got %q, %+v", req.conversation, aerr)
			}
		})
	}
}

// convStub is a Conversations holding one conversation's items.
type convStub struct {
	items    [][]byte
	appended [][]byte
}

func (c *convStub) Context(_ context.Context, owner, id string) ([][]byte, error) {
	if owner != "alice" || id != "conv_1" {
		return nil, ErrConversationNotFound
	}
	return c.items, nil
}

func (c *convStub) Append(_ context.Context, _, _ string, items [][]byte) error {
	c.appended = append(c.appended, items...)
	return nil
}

// TestConversationHistory: input items already in the conversation are not
// sent again; an id twice in the input is a 400; another owner's
// conversation is a 404.
func TestConversationHistory(t *testing.T) {
	stub := &convStub{items: [][]byte{textItem("m1", "user", "one"), textItem("m2", "assistant", "two")}}
	s := &Service{convs: stub, log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name, owner string
		input       [][]byte
		kept        string
		status      int
		param       string
	}{
		{"new input", "alice", [][]byte{textItem("m3", "user", "three")}, "m3", 0, ""},
		{"resent history", "alice", [][]byte{textItem("m1", "user", "one"), textItem("m2", "assistant", "two"), textItem("m3", "user", "three")}, "m3", 0, ""},
		{"an id twice", "alice", [][]byte{textItem("m3", "user", "three"), textItem("m3", "user", "again")}, "", 400, "input[1].id"},
		{"a slash in an id", "alice", [][]byte{textItem("m/3", "user", "three")}, "", 400, "input[0].id"},
		{"another owner", "bob", [][]byte{textItem("m3", "user", "three")}, "", 404, "conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &createRequest{conversation: "conv_1", input: tc.input}
			hist, aerr := s.conversationHistory(t.Context(), tc.owner, req)
			if tc.status != 0 {
				if aerr == nil || aerr.Status != tc.status || aerr.Param != tc.param {
					t.Fatalf("got %+v, want %d %s", aerr, tc.status, tc.param)
				}
				return
			}
			if aerr != nil {
				t.Fatal(aerr)
			}
			var kept []string
			for _, it := range req.input {
				kept = append(kept, gjson.GetBytes(it, "id").Str)
			}
			if strings.Join(kept, ",") != tc.kept || gjson.GetBytes(hist, "#.id").Raw != `["m1","m2"]` {
				t.Errorf("kept %v, history %s", kept, hist)
			}
		})
	}
}

// TestAppendToConversation: a completed or incomplete response appends its
// input and then its output; a failed one, or one without a
// conversation, appends nothing.
func TestAppendToConversation(t *testing.T) {
	for _, tc := range []struct {
		status, conversation string
		want                 string
	}{
		{"completed", "conv_1", `["in1","out1"]`},
		{"incomplete", "conv_1", `["in1","out1"]`},
		{"failed", "conv_1", `[]`},
		{"completed", "", `[]`},
	} {
		t.Run(tc.status+tc.conversation, func(t *testing.T) {
			stub := &convStub{}
			s := &Service{convs: stub, log: slog.New(slog.DiscardHandler)}
			ru := &run{s: s, owner: "alice", req: &createRequest{conversation: tc.conversation, input: [][]byte{textItem("in1", "user", "q")}},
				obj: &responseObject{ID: "resp_1", Status: tc.status, Output: []json.RawMessage{textItem("out1", "assistant", "a")}}}
			if err := s.appendToConversation(t.Context(), ru); err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(joinItems(stub.appended), "#.id").Raw; got != tc.want {
				t.Errorf("appended %s, want %s", got, tc.want)
			}
		})
	}
}
