package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// conversationVendors are the vendor stack's chat models, one per wire
// format, with the fake each reaches.
var conversationVendors = []struct{ model, provider string }{
	{"vendor/gpt", "openai"},
	{"vendor/claude", "anthropic"},
	{"vendor/gemini", "gemini"},
}

// TestConversations drives the Conversations API and conversation on
// POST /v1/responses through openai-go, on a model of each vendor: the
// conversation's items are each turn's context, each turn's input and
// output are appended in order, metadata updates, items are listed,
// fetched and deleted, another key cannot see it, and deleting it erases
// its rows and data keys.
func TestConversations(t *testing.T) {
	vs := newVendorStack(t)
	ctx := context.Background()
	c := vs.client()
	other, _, err := vs.gw.Keys.Issue(ctx, keys.Spec{Name: "other", Tier: "enterprise", RPM: 1_000_000, TPM: 1_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	oc := vs.clientWith(other)

	for _, v := range conversationVendors {
		t.Run(v.model, func(t *testing.T) {
			marker := strings.NewReplacer("/", "-").Replace(v.model)
			conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{
				Items: []responses.ResponseInputItemUnionParam{
					responses.ResponseInputItemParamOfMessage("my name is Ada "+marker, responses.EasyInputMessageRoleUser),
				},
				Metadata: shared.Metadata{"topic": "demo"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(conv.ID, "conv_") || conv.CreatedAt == 0 || fmt.Sprint(conv.Metadata) != "map[topic:demo]" {
				t.Fatalf("conversation %+v", conv)
			}

			// Two turns, the conversation named both ways the API allows.
			turn := func(input string, param responses.ResponseNewParamsConversationUnion) *responses.Response {
				t.Helper()
				r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: v.model, Conversation: param,
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != responses.ResponseStatusCompleted || r.Conversation.ID != conv.ID {
					t.Fatalf("response %s conversation %q", r.Status, r.Conversation.ID)
				}
				return r
			}
			r1 := turn("first question", responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)})
			up := string(vs.lastRequest(t, v.provider).body)
			if !strings.Contains(up, "my name is Ada "+marker) || !strings.Contains(up, "first question") {
				t.Errorf("turn 1: the vendor saw %.300s", up)
			}
			r2 := turn("second question", responses.ResponseNewParamsConversationUnion{
				OfConversationObject: &responses.ResponseConversationParam{ID: conv.ID}})
			up = string(vs.lastRequest(t, v.provider).body)
			echoed, _ := json.Marshal(r1.OutputText()) // as it appears in the vendor's JSON
			for _, want := range []string{"my name is Ada " + marker, "first question", strings.Trim(string(echoed), `"`), "second question"} {
				if !strings.Contains(up, want) {
					t.Errorf("turn 2: the vendor did not see %q: %.400s", want, up)
				}
			}

			// The items: the initial one, then each turn's input and output.
			page, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range page.Data {
				got = append(got, it.Type+":"+it.Role)
			}
			if strings.Join(got, ",") != "message:user,message:user,message:assistant,message:user,message:assistant" || page.HasMore {
				t.Fatalf("items %v (has_more %v)", got, page.HasMore)
			}
			if page.Data[2].ID != r1.Output[0].ID || page.Data[4].ID != r2.Output[0].ID {
				t.Errorf("output items %s %s, want %s %s", page.Data[2].ID, page.Data[4].ID, r1.Output[0].ID, r2.Output[0].ID)
			}
			// Newest first by default, in pages.
			desc, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Limit: openai.Int(2)})
			if err != nil || len(desc.Data) != 2 || !desc.HasMore || desc.Data[0].ID != page.Data[4].ID {
				t.Fatalf("first desc page: %v %+v", err, desc)
			}
			next, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Limit: openai.Int(2), After: openai.String(desc.Data[1].ID)})
			if err != nil || len(next.Data) != 2 || next.Data[0].ID != page.Data[2].ID {
				t.Fatalf("second desc page: %v %+v", err, next)
			}

			// Metadata, one item, deleting one item.
			upd, err := c.Conversations.Update(ctx, conv.ID, conversations.ConversationUpdateParams{Metadata: shared.Metadata{"topic": "changed"}})
			if err != nil || fmt.Sprint(upd.Metadata) != "map[topic:changed]" {
				t.Fatalf("update: %v %+v", err, upd)
			}
			if g, err := c.Conversations.Get(ctx, conv.ID); err != nil || fmt.Sprint(g.Metadata) != "map[topic:changed]" {
				t.Fatalf("get after update: %v %+v", err, g)
			}
			it, err := c.Conversations.Items.Get(ctx, conv.ID, page.Data[1].ID, conversations.ItemGetParams{})
			if err != nil || it.ID != page.Data[1].ID || it.Role != "user" || it.Type != "message" {
				t.Fatalf("item: %v %+v", err, it)
			}
			if _, err := c.Conversations.Items.Delete(ctx, conv.ID, page.Data[2].ID); err != nil {
				t.Fatal(err)
			}
			_, err = c.Conversations.Items.Get(ctx, conv.ID, page.Data[2].ID, conversations.ItemGetParams{})
			apiError(t, err, http.StatusNotFound, "not_found")
			after, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{})
			if err != nil || len(after.Data) != 4 {
				t.Fatalf("items after a delete: %v %d", err, len(after.Data))
			}

			// Another key's view: none of it exists.
			_, err = oc.Conversations.Get(ctx, conv.ID)
			apiError(t, err, http.StatusNotFound, "not_found")
			_, err = oc.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{})
			apiError(t, err, http.StatusNotFound, "not_found")
			_, err = oc.Conversations.Delete(ctx, conv.ID)
			apiError(t, err, http.StatusNotFound, "not_found")
			_, err = oc.Responses.New(ctx, responses.ResponseNewParams{Model: v.model,
				Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
				Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("let me in")}})
			apiError(t, err, http.StatusNotFound, "not_found")

			// With previous_response_id: refused, as OpenAI refuses it.
			_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: v.model, PreviousResponseID: openai.String(r2.ID),
				Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
				Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("both")}})
			apiError(t, err, http.StatusBadRequest, "mutually_exclusive_parameters")

			del, err := c.Conversations.Delete(ctx, conv.ID)
			if err != nil || !del.Deleted || del.ID != conv.ID {
				t.Fatalf("delete: %v %+v", err, del)
			}
			_, err = c.Conversations.Get(ctx, conv.ID)
			apiError(t, err, http.StatusNotFound, "not_found")
			_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: v.model,
				Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
				Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("again")}})
			apiError(t, err, http.StatusNotFound, "not_found")
			if n := conversationRows(t, vs.dataDir, conv.ID); n != 0 {
				t.Errorf("%d rows and data keys of the deleted conversation remain", n)
			}
		})
	}
}

// conversationRows counts the rows and data keys of conversation id left
// in DATA_DIR/conversations.db.
func conversationRows(t *testing.T, dataDir, id string) int {
	t.Helper()
	db, err := sqlitedb.Open(t.Context(), filepath.Join(dataDir, "conversations.db"), "e2e-check", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	total := 0
	for _, q := range []string{
		`SELECT count(*) FROM conversations WHERE id = ?`,
		`SELECT count(*) FROM conversation_items WHERE conversation_id = ?`,
		`SELECT count(*) FROM data_keys WHERE object_id >= ? AND object_id < ? || char(255)`,
	} {
		args := []any{id}
		if strings.Count(q, "?") == 2 {
			args = append(args, id)
		}
		var n int
		if err := db.QueryRowContext(t.Context(), q, args...).Scan(&n); err != nil && err != sql.ErrNoRows {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// TestResponsesTruncation: a conversation longer than the model's context
// window gets 400 context_length_exceeded with truncation "disabled" (the
// default), and with "auto" is answered from its newest turns, the oldest
// left out whole; on a model of each vendor.
func TestResponsesTruncation(t *testing.T) {
	vs := newVendorStack(t)
	ctx := context.Background()
	c := vs.client()
	// Four turns of about 75,000 tokens each (the gateway's estimate, 4
	// bytes a token): 300,000 together, past every model's window
	// (vendor/claude's 200,000, the others' default 128,000).
	filler := strings.Repeat("lorem ", 50_000)
	for _, v := range conversationVendors {
		t.Run(v.model, func(t *testing.T) {
			var items []responses.ResponseInputItemUnionParam
			for i := range 4 {
				items = append(items, responses.ResponseInputItemParamOfMessage(fmt.Sprintf("turn-%d %s", i, filler), responses.EasyInputMessageRoleUser))
			}
			conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{Items: items})
			if err != nil {
				t.Fatal(err)
			}
			params := func(trunc responses.ResponseNewParamsTruncation) responses.ResponseNewParams {
				return responses.ResponseNewParams{Model: v.model, Truncation: trunc, Instructions: openai.String("Be brief."),
					Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
					Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("the newest question")}}
			}
			for _, trunc := range []responses.ResponseNewParamsTruncation{"", responses.ResponseNewParamsTruncationDisabled} {
				_, err := c.Responses.New(ctx, params(trunc))
				apiError(t, err, http.StatusBadRequest, "context_length_exceeded")
			}
			r, err := c.Responses.New(ctx, params(responses.ResponseNewParamsTruncationAuto))
			if err != nil {
				t.Fatal(err)
			}
			// The fakes echo the last user message; Anthropic's merges the
			// consecutive user turns into one, whose echo may reach
			// max_tokens: incomplete, which is an answer too.
			if (r.Status != responses.ResponseStatusCompleted && r.Status != responses.ResponseStatusIncomplete) || r.Truncation != responses.ResponseTruncationAuto {
				t.Fatalf("status %s truncation %s", r.Status, r.Truncation)
			}
			up := string(vs.lastRequest(t, v.provider).body)
			for _, keep := range []string{"Be brief.", "turn-3", "the newest question"} {
				if !strings.Contains(up, keep) {
					t.Errorf("the vendor did not see %q", keep)
				}
			}
			if strings.Contains(up, "turn-0") || strings.Contains(up, "turn-1") {
				t.Errorf("the oldest turns were sent (%d bytes)", len(up))
			}
			// The conversation itself keeps every item.
			page, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Limit: openai.Int(100)})
			if err != nil || len(page.Data) != 6 {
				t.Errorf("items after the turn: %v %d", err, len(page.Data))
			}
		})
	}
}

// TestConversationsAcrossReplicas: two gateways with storage.metadata.kind
// postgres on one database: a conversation created on one continues on
// the other (a streamed turn there), both list the same items, and a
// delete through one erases its rows from the shared database.
func TestConversationsAcrossReplicas(t *testing.T) {
	t.Setenv(fleetDSNEnv, pgtest.DSN(t))
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(make([]byte, envelope.KeySize)))
	extra := fmt.Sprintf("storage:\n  metadata:\n    kind: postgres\n    dsn_env: %s\n", fleetDSNEnv)
	a := newStack(t, stackOptions{extraYAML: extra})
	b := newStack(t, stackOptions{extraYAML: extra, gateway: func(o *gateway.Options) { o.DataDir = a.dataDir }})
	ctx := context.Background()
	ca, cb := a.client(), b.client(option.WithAPIKey(a.key))

	conv, err := ca.Conversations.New(ctx, conversations.ConversationNewParams{Metadata: shared.Metadata{"replica": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	param := responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}
	if _, err := ca.Responses.New(ctx, responses.ResponseNewParams{Model: "demo/chat", Conversation: param,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello from replica a")}}); err != nil {
		t.Fatal(err)
	}
	st := cb.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "demo/chat", Conversation: param,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and on replica b")}})
	var done *responses.Response
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			r := ev.Response
			done = &r
		}
	}
	if err := st.Err(); err != nil || done == nil {
		t.Fatalf("streamed turn on b: %v (completed %v)", err, done != nil)
	}
	if up := string(b.upstream.all()[len(b.upstream.all())-1].body); !strings.Contains(up, "hello from replica a") {
		t.Errorf("b's model call lacked a's turn: %.300s", up)
	}
	for name, c := range map[string]openai.Client{"a": ca, "b": cb} {
		page, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
		if err != nil || len(page.Data) != 4 || page.Data[3].ID != done.Output[0].ID {
			t.Fatalf("items through %s: %v %+v", name, err, page)
		}
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "conversations.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("conversations.db in the data directory of a fleet: %v", err)
	}
	if _, err := cb.Conversations.Delete(ctx, conv.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ca.Conversations.Get(ctx, conv.ID)
	apiError(t, err, http.StatusNotFound, "not_found")
	pg, err := pgx.Connect(ctx, os.Getenv(fleetDSNEnv))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	var n int
	if err := pg.QueryRow(ctx, `SELECT (SELECT count(*) FROM conversations) + (SELECT count(*) FROM conversation_items)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows left (%v)", n, err)
	}
}
