package responses

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Conversations keeps the conversations that POST /v1/responses continues
// through its conversation parameter; *conversations.Service implements
// it. The conversation's items are the context before the new input, and
// the response's input and output items are appended to it when the
// response is done.
type Conversations interface {
	// Context returns the items of owner's conversation id, oldest first:
	// ErrConversationNotFound when it is absent or another owner's,
	// ErrConversationTooLarge when it holds more than the service
	// replays.
	Context(ctx context.Context, owner, id string) ([][]byte, error)
	// Append adds items (normalized, each a JSON object with an id) at
	// the end of owner's conversation id.
	Append(ctx context.Context, owner, id string, items [][]byte) error
}

// Errors of Conversations.Context.
var (
	ErrConversationNotFound = errors.New("responses: conversation not found")
	ErrConversationTooLarge = errors.New("responses: conversation too large")
)

// NormalizeItems validates a JSON array of input items as POST
// /v1/responses does and returns them in the stored shape (an id, a type
// and a status on every item; newID mints the ids items lack). param
// names the array in errors.
func NormalizeItems(param string, items gjson.Result, newID func(prefix string) string) ([][]byte, *apierror.Error) {
	if !items.IsArray() {
		return nil, typeError(param, "an array", items)
	}
	arr := items.Array()
	out := make([][]byte, 0, len(arr))
	for i, it := range arr {
		item, aerr := normalizeItem(fmt.Sprintf("%s[%d]", param, i), it, newID)
		if aerr != nil {
			return nil, aerr
		}
		out = append(out, item)
	}
	return out, nil
}

// parseConversation reads conversation: a conversation id, or {"id": ...}.
// With previous_response_id it is refused, as OpenAI refuses it: the two
// are different ways of keeping the same state.
func (req *createRequest) parseConversation(root gjson.Result) *apierror.Error {
	v := root.Get("conversation")
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	id := v
	if v.IsObject() {
		id = v.Get("id")
		if !id.Exists() || id.Type == gjson.Null {
			return apierror.MissingParam("conversation.id")
		}
		if id.Type != gjson.String {
			return typeError("conversation.id", "a string", id)
		}
	} else if v.Type != gjson.String {
		return typeError("conversation", "a string or an object", v)
	}
	if id.Str == "" {
		return apierror.InvalidParam("conversation", "Invalid 'conversation': empty string. Expected a conversation id.")
	}
	if req.previousID != "" {
		return &apierror.Error{Status: http.StatusBadRequest, Code: "mutually_exclusive_parameters", Param: "conversation",
			Message: "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or 'conversation'."}
	}
	req.conversation = id.Str
	return nil
}

func conversationNotFound(id string) *apierror.Error {
	return &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "conversation",
		Message: "Conversation with id '" + id + "' not found."}
}

// conversationHistory loads the items of req's conversation, the history
// before req.input, and drops from req.input the items the conversation
// already holds (clients that keep their own history resend them; the
// model must not see them twice, and an item id is unique in a
// conversation).
func (s *Service) conversationHistory(ctx context.Context, owner string, req *createRequest) ([]byte, *apierror.Error) {
	if s.convs == nil {
		return nil, apierror.InvalidParam("conversation", "Conversations are not configured on this gateway.")
	}
	items, err := s.convs.Context(ctx, owner, req.conversation)
	switch {
	case errors.Is(err, ErrConversationNotFound):
		return nil, conversationNotFound(req.conversation)
	case errors.Is(err, ErrConversationTooLarge):
		return nil, apierror.InvalidParam("conversation", "Conversation '%s' holds more items than this gateway replays. "+
			"Delete items from it, or start a new conversation.", req.conversation)
	case err != nil:
		s.log.Error("responses: load conversation failed", "conversation", req.conversation, "err", err)
		return nil, apierror.Server(http.StatusInternalServerError, "internal_error", "The conversation could not be loaded.")
	}
	seen := make(map[string]bool, len(items)+len(req.input))
	inConv := make(map[string]bool, len(items))
	for _, it := range items {
		id := gjson.GetBytes(it, "id").Str
		seen[id], inConv[id] = true, true
	}
	kept := req.input[:0]
	for i, it := range req.input {
		id := gjson.GetBytes(it, "id").Str
		if len(id) > 256 || strings.Contains(id, "/") {
			// The conversation's items are addressed by id in paths.
			return nil, apierror.InvalidParam(fmt.Sprintf("input[%d].id", i), "Invalid 'input[%d].id': expected at most 256 characters and no '/' in an item of a conversation.", i)
		}
		if seen[id] && !inConv[id] {
			// Twice in this input: the conversation could not hold both.
			return nil, apierror.InvalidParam(fmt.Sprintf("input[%d].id", i), "Duplicate item id '%s' in 'input'.", id)
		}
		if !seen[id] {
			kept = append(kept, it)
			seen[id] = true
		}
	}
	req.input = kept
	return joinItems(items), nil
}

// appendToConversation adds the response's input and output items to its
// conversation once it is done (completed or incomplete: a failed
// response leaves the conversation as it was).
func (s *Service) appendToConversation(ctx context.Context, ru *run) error {
	if ru.req.conversation == "" || (ru.obj.Status != "completed" && ru.obj.Status != "incomplete") {
		return nil
	}
	items := make([][]byte, 0, len(ru.req.input)+len(ru.obj.Output))
	items = append(items, ru.req.input...)
	for _, o := range ru.obj.Output {
		items = append(items, o)
	}
	// As the store: the response exists, so its turn is kept even if the
	// client hangs up now.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.convs.Append(actx, ru.owner, ru.req.conversation, items); err != nil {
		s.log.Error("responses: append to conversation failed", "response", ru.obj.ID, "conversation", ru.req.conversation, "err", err)
		return err
	}
	return nil
}
