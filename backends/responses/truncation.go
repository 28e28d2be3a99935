package responses

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

// Counting a context against the model's context window (truncation
// "auto"). The gateway refuses a chat completion whose prompt it estimates
// past the window (a token per bytesPerToken bytes of message text, plus
// tokensPerMessage a message); an item is counted here as the larger of
// that estimate and the model's tokenizer's count, so a context that fits
// here fits both the gateway's check and the model.
const (
	bytesPerToken    = 4
	tokensPerMessage = 3
)

// fillContext adds the request's instructions, the history (JSON arrays
// of normalized items, oldest first) and its input to ru.conv. With
// truncation "auto", when they exceed the model's context window, the
// oldest turns (a user message and the items after it, up to the next
// user message) are left out, whole, until the rest fits; system and
// developer messages and the last input item are always kept. With
// "disabled" everything is sent, and a context past the window gets the
// gateway's 400 context_length_exceeded.
func (s *Service) fillContext(ctx context.Context, ru *run, history [][]byte) {
	req := ru.req
	if req.instructions != "" {
		ru.conv.addInstructions(req.instructions)
	}
	var items []gjson.Result
	for _, arr := range history {
		items = append(items, gjson.ParseBytes(arr).Array()...)
	}
	for _, it := range req.input {
		items = append(items, gjson.ParseBytes(it))
	}
	var dropped []bool
	if req.truncation == "auto" && len(items) > 1 {
		dropped = s.truncate(ctx, ru, items)
	}
	for i, it := range items {
		if dropped == nil || !dropped[i] {
			ru.conv.addItem(it)
		}
	}
}

// truncate returns which items to leave out so that the context fits the
// model's context window (nil: all fit, or the window is unknown).
func (s *Service) truncate(ctx context.Context, ru *run, items []gjson.Result) []bool {
	window := s.contextWindow(ctx, ru.owner, ru.req.model)
	if window <= 0 {
		return nil
	}
	tok := s.tokenizerFor(ru.req.model)
	costs := make([]int64, len(items))
	var total int64
	if ru.req.instructions != "" {
		total += textCost(tok, ru.req.instructions)
	}
	for i, it := range items {
		costs[i] = itemCost(tok, it)
		total += costs[i]
	}
	if total <= window {
		return nil
	}
	dropped := make([]bool, len(items))
	n := 0
	for start := 0; start < len(items)-1 && total > window; {
		end := start + 1
		for end < len(items)-1 && !isUserMessage(items[end]) {
			end++
		}
		for k := start; k < end; k++ {
			if !isSystemMessage(items[k]) {
				dropped[k] = true
				total -= costs[k]
				n++
			}
		}
		start = end
	}
	s.log.Info("responses: context truncated to the model's context window", "response", ru.obj.ID,
		"items_dropped", n, "items_kept", len(items)-n, "context_window", window)
	return dropped
}

// contextWindow asks the gateway for model's context window (GET
// /v1/models/{model}, which reflects the configuration in force); 0 when
// it cannot say, and then nothing is truncated: the model call itself
// reports an unknown model.
func (s *Service) contextWindow(ctx context.Context, owner, model string) int64 {
	segs := strings.Split(model, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	resp, err := s.gw.Do(ctx, owner, caller.OriginResponses, http.MethodGet, "/v1/models/"+strings.Join(segs, "/"), nil)
	if err != nil {
		s.log.Warn("responses: model lookup failed", "err", err)
		return 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0
	}
	return gjson.GetBytes(b, "context_window").Int()
}

// tokenizerFor is the tokenizer configured for model (Options.Tokenizers),
// else the byte estimate.
func (s *Service) tokenizerFor(model string) tokenizer.Tokenizer {
	if name := s.tokenizers[model]; name != "" {
		if t, err := tokenizer.For(name); err == nil {
			return t
		}
	}
	t, _ := tokenizer.For(tokenizer.Estimate)
	return t
}

func textCost(tok tokenizer.Tokenizer, text string) int64 {
	n := int64(tok.Count(text))
	if est := int64(len(text)+bytesPerToken-1) / bytesPerToken; est > n {
		n = est
	}
	return n + tokensPerMessage
}

// itemCost is what a normalized item adds to the prompt; 0 for items the
// model is not sent (reasoning, built-in tool calls).
func itemCost(tok tokenizer.Tokenizer, it gjson.Result) int64 {
	switch it.Get("type").Str {
	case "message":
		return textCost(tok, messageText(it.Get("content")))
	case "function_call":
		return textCost(tok, it.Get("name").Str+it.Get("arguments").Str)
	case "function_call_output":
		out := it.Get("output")
		if out.Type == gjson.String {
			return textCost(tok, out.Str)
		}
		return textCost(tok, messageText(out))
	}
	return 0
}

func isUserMessage(it gjson.Result) bool {
	return it.Get("type").Str == "message" && it.Get("role").Str == "user"
}

func isSystemMessage(it gjson.Result) bool {
	if it.Get("type").Str != "message" {
		return false
	}
	r := it.Get("role").Str
	return r == "system" || r == "developer"
}
