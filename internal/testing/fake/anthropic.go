package fake

// This file is the Anthropic Messages API fake (NewAnthropic). It answers like
// the OpenAI fake (see the package documentation): the same reply text, tool
// calls, stop and length behaviour, token counts and x-fake-* fault headers,
// rendered in Anthropic's wire format. The request is converted to the
// OpenAI fake's chatRequest and answered by the same generate, so the two
// fakes cannot drift apart.
//
// Where the OpenAI fake is permissive, this one checks the rules a real
// Anthropic upstream enforces and a translating gateway can get wrong:
// required max_tokens and anthropic-version, roles, non-empty text blocks,
// tool_use/tool_result pairing between consecutive turns, tool_result blocks
// first in their turn, temperature within 0..1, known top-level fields.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// anthropicVersionHeader is the header every Anthropic request must carry.
const anthropicVersionHeader = "anthropic-version"

// NewAnthropic returns a fake Anthropic Messages API upstream serving
// POST /v1/messages. When opts.APIKey is set it must be sent as x-api-key.
// Errors use Anthropic's shape: {"type":"error","error":{"type","message"}}.
//
// It panics if opts.Fault.Status is set outside 400-599.
func NewAnthropic(opts Options) http.Handler {
	if s := opts.Fault.Status; s != 0 && (s < 400 || s > 599) {
		panic(fmt.Sprintf("fake: Options.Fault.Status %d outside 400-599", s))
	}
	return &anthropicHandler{opts: opts, cache: newPromptCache(opts.PromptCache)}
}

type anthropicHandler struct {
	opts  Options
	cache *promptCache // nil: no prompt caching
}

// anthropicError is an error answered in Anthropic's shape.
type anthropicError struct {
	status     int
	typ        string // invalid_request_error, authentication_error, ...
	message    string
	retryAfter int
}

func anthropicInvalid(format string, args ...any) *anthropicError {
	return &anthropicError{status: http.StatusBadRequest, typ: "invalid_request_error", message: fmt.Sprintf(format, args...)}
}

// anthropicErrorType is the error type Anthropic uses for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (e *anthropicError) write(w http.ResponseWriter) {
	b, err := json.Marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}{Type: "error", Error: struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{e.typ, e.message}})
	if err != nil { // cannot happen: only strings
		panic(err)
	}
	w.Header().Set("content-type", "application/json")
	if e.retryAfter > 0 {
		w.Header().Set("retry-after", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

func (h *anthropicHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// As in the OpenAI fake: read the body first so that a departing client
	// cancels r.Context() and ends the delay below.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			(&anthropicError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large",
				message: fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", maxBody)}).write(w)
		}
		return
	}

	f, ferr := parseFault(h.opts.Fault, r)
	// With prompt caching, the prefix up to a breakpoint seen before is
	// read from the cache, and the prompt answers sooner.
	var points []cachePoint
	var cache anthropicCacheUse
	serviceTime := h.opts.ServiceTime
	if h.cache != nil && r.Method == http.MethodPost {
		if points = h.cache.anthropicPoints(body); len(points) > 0 {
			cache.read, cache.creation = h.cache.explicit(points)
			serviceTime = h.cache.serviceTime(serviceTime, cache.read, points[len(points)-1].tokens)
		}
	}
	if sleep(r.Context(), serviceTime+f.delay) != nil {
		return
	}
	if ferr != nil {
		anthropicInvalid("%s", ferr.Message).write(w)
		return
	}
	if r.URL.Path != "/v1/messages" {
		(&anthropicError{status: http.StatusNotFound, typ: "not_found_error", message: "Not Found"}).write(w)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("allow", http.MethodPost)
		(&anthropicError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			message: fmt.Sprintf("Method %s is not allowed for %s; use POST.", r.Method, r.URL.Path)}).write(w)
		return
	}
	if h.opts.APIKey != "" {
		switch key := r.Header.Get("x-api-key"); {
		case key == "":
			(&anthropicError{status: http.StatusUnauthorized, typ: "authentication_error", message: "x-api-key header is required"}).write(w)
			return
		case key != h.opts.APIKey:
			(&anthropicError{status: http.StatusUnauthorized, typ: "authentication_error", message: "invalid x-api-key"}).write(w)
			return
		}
	}
	if r.Header.Get(anthropicVersionHeader) == "" {
		anthropicInvalid("anthropic-version: header is required").write(w)
		return
	}
	if f.status != 0 {
		e := f.statusError() // the OpenAI fake's message and retry-after
		(&anthropicError{status: f.status, typ: anthropicErrorType(f.status), message: e.Message, retryAfter: e.RetryAfter}).write(w)
		return
	}

	req, aerr := parseAnthropicRequest(body)
	if aerr != nil {
		aerr.write(w)
		return
	}
	rep := generate(req, body, f.chunks)
	out := anthropicOutcome(req, body, f.chunks, rep)
	if len(points) > 0 {
		h.cache.storeExplicit(points)
	}
	use := cache.usage(rep)
	w.Header().Set("request-id", "req_"+rep.id[len("chatcmpl-"):])
	if req.Stream {
		h.stream(w, r, req, rep, out, f, use)
		return
	}
	writeAnthropicMessage(w, req, rep, out, use)
}

// anthropicCacheUse is what a request read from and wrote to the prompt
// cache, in tokens.
type anthropicCacheUse struct{ read, creation int }

// usage splits rep's prompt tokens as Anthropic reports them: input_tokens
// are the tokens after the last cache breakpoint, apart from the cache's.
func (c anthropicCacheUse) usage(rep *reply) anthropicUsage {
	read := min(c.read, rep.promptTokens)
	creation := min(c.creation, rep.promptTokens-read)
	return anthropicUsage{InputTokens: rep.promptTokens - read - creation,
		CacheReadInputTokens: read, CacheCreationInputTokens: creation, OutputTokens: rep.completionTokens}
}

// Request wire types. Blocks are decoded into one struct for all types;
// the type field says which fields matter.

type anthropicRequest struct {
	Model         string               `json:"model"`
	MaxTokens     *int                 `json:"max_tokens"`
	Messages      []anthropicMessage   `json:"messages"`
	System        json.RawMessage      `json:"system"`
	StopSequences []string             `json:"stop_sequences"`
	Stream        bool                 `json:"stream"`
	Temperature   *float64             `json:"temperature"`
	TopP          *float64             `json:"top_p"`
	Tools         []anthropicTool      `json:"tools"`
	ToolChoice    *anthropicToolChoice `json:"tool_choice"`
	Metadata      map[string]any       `json:"metadata"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // string or array of blocks
}

type anthropicBlock struct {
	Type      string           `json:"type"`
	Text      *string          `json:"text"`
	Source    *anthropicSource `json:"source"`
	ID        string           `json:"id"`
	Name      string           `json:"name"`
	Input     json.RawMessage  `json:"input"`
	ToolUseID string           `json:"tool_use_id"`
	Content   json.RawMessage  `json:"content"`
}

type anthropicSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

type anthropicTool struct {
	Type        string          `json:"type"` // absent or "custom" for client tools
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
}

// anthropicFields are the top-level request fields Anthropic knows (a subset
// of them matters to the fake); like the real API, others are refused.
var anthropicFields = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "system": true, "stop_sequences": true,
	"stream": true, "temperature": true, "top_p": true, "top_k": true, "tools": true,
	"tool_choice": true, "metadata": true, "thinking": true, "service_tier": true,
	"container": true, "mcp_servers": true, "context_management": true,
}

var anthropicToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// parseAnthropicRequest decodes and checks body and converts it to the OpenAI
// fake's request, with Anthropic's error for each mistake.
func parseAnthropicRequest(body []byte) (*chatRequest, *anthropicError) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, anthropicInvalid("There was an error parsing the body of your request as JSON.")
	}
	for k := range top {
		if !anthropicFields[k] {
			return nil, anthropicInvalid("%s: Extra inputs are not permitted", k)
		}
	}
	var ar anthropicRequest
	if err := json.Unmarshal(body, &ar); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typeErr.Field != "" {
			return nil, anthropicInvalid("%s: Input should be a valid %s", typeErr.Field, typeErr.Type)
		}
		return nil, anthropicInvalid("There was an error parsing the body of your request as JSON.")
	}
	switch {
	case ar.Model == "":
		return nil, anthropicInvalid("model: Field required")
	case ar.MaxTokens == nil:
		return nil, anthropicInvalid("max_tokens: Field required")
	case *ar.MaxTokens < 1:
		return nil, anthropicInvalid("max_tokens: Input should be greater than or equal to 1")
	case ar.Messages == nil:
		return nil, anthropicInvalid("messages: Field required")
	case len(ar.Messages) == 0:
		return nil, anthropicInvalid("messages: at least one message is required")
	case ar.Temperature != nil && (*ar.Temperature < 0 || *ar.Temperature > 1):
		return nil, anthropicInvalid("temperature: Input should be less than or equal to 1")
	case ar.TopP != nil && (*ar.TopP < 0 || *ar.TopP > 1):
		return nil, anthropicInvalid("top_p: Input should be less than or equal to 1")
	}
	for k := range ar.Metadata {
		if k != "user_id" {
			return nil, anthropicInvalid("metadata.%s: Extra inputs are not permitted", k)
		}
	}

	req := &chatRequest{Model: ar.Model, Stream: ar.Stream, n: 1, maxWords: *ar.MaxTokens}
	for _, s := range ar.StopSequences {
		if s != "" {
			req.stops = append(req.stops, s)
		}
	}
	if aerr := anthropicSystem(ar.System, req); aerr != nil {
		return nil, aerr
	}
	if aerr := anthropicMessages(ar.Messages, req); aerr != nil {
		return nil, aerr
	}
	if aerr := anthropicTools(&ar, req); aerr != nil {
		return nil, aerr
	}
	tool, cerr := chooseTool(req)
	if cerr != nil {
		return nil, anthropicInvalid("%s", cerr.Message)
	}
	req.tool = tool
	return req, nil
}

// anthropicSystem checks the system prompt (a string or text blocks) and
// counts it as the first message, as an OpenAI system message is counted.
func anthropicSystem(raw json.RawMessage, req *chatRequest) *anthropicError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '[' {
		var blocks []anthropicBlock
		if json.Unmarshal(raw, &blocks) != nil {
			return anthropicInvalid("system: Input should be a valid list")
		}
		for i, b := range blocks {
			if b.Type != "text" || b.Text == nil {
				return anthropicInvalid("system.%d: Input should be a text block", i)
			}
			if *b.Text == "" {
				return anthropicInvalid("system: text content blocks must be non-empty")
			}
		}
	} else if raw[0] != '"' {
		return anthropicInvalid("system: Input should be a valid string")
	}
	req.Messages = append(req.Messages, chatMessage{Role: "system", Content: raw})
	return nil
}

// anthropicMessages checks the conversation and converts it for generate:
// each tool_result block becomes a "tool" message carrying its content, and
// the rest of a turn's blocks one message of the turn's role.
func anthropicMessages(msgs []anthropicMessage, req *chatRequest) *anthropicError {
	var prevToolUses []string // ids of the previous turn's tool_use blocks
	for i, m := range msgs {
		last := i == len(msgs)-1
		if m.Role != "user" && m.Role != "assistant" {
			return anthropicInvalid("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		empty := anthropicInvalid("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		raw := bytes.TrimSpace(m.Content)
		if len(raw) == 0 || raw[0] != '[' {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return anthropicInvalid("messages.%d.content: Input should be a valid string or list of content blocks", i)
			}
			if s == "" && !(last && m.Role == "assistant") {
				return empty
			}
			if len(prevToolUses) > 0 {
				return anthropicMissingResults(i-1, prevToolUses)
			}
			prevToolUses = nil
			req.Messages = append(req.Messages, chatMessage{Role: m.Role, Content: raw})
			continue
		}
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return anthropicInvalid("messages.%d.content: Input should be a valid list", i)
		}
		if len(items) == 0 && !(last && m.Role == "assistant") {
			return empty
		}
		var rest []json.RawMessage
		var toolUses []string
		answered := map[string]bool{}
		for j, item := range items {
			var b anthropicBlock
			if json.Unmarshal(item, &b) != nil {
				return anthropicInvalid("messages.%d.content.%d: Input should be a valid content block", i, j)
			}
			if aerr := checkAnthropicBlock(i, j, m.Role, &b); aerr != nil {
				return aerr
			}
			switch b.Type {
			case "tool_use":
				toolUses = append(toolUses, b.ID)
				rest = append(rest, item)
			case "tool_result":
				if len(rest) > 0 {
					return anthropicInvalid("messages.%d.content.%d: tool_result blocks must come first in the content array, before any other content", i, j)
				}
				if !anthropicContains(prevToolUses, b.ToolUseID) {
					return anthropicInvalid("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
				content := b.Content
				if len(content) == 0 {
					content = json.RawMessage(`""`)
				}
				req.Messages = append(req.Messages, chatMessage{Role: "tool", Content: content})
			default:
				rest = append(rest, item)
			}
		}
		var missing []string
		for _, id := range prevToolUses {
			if !answered[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return anthropicMissingResults(i-1, missing)
		}
		if len(rest) > 0 || len(answered) == 0 {
			content := json.RawMessage(`[]`)
			if len(rest) > 0 {
				var err error
				if content, err = json.Marshal(rest); err != nil { // cannot happen: valid raw JSON
					panic(err)
				}
			}
			req.Messages = append(req.Messages, chatMessage{Role: m.Role, Content: content})
		}
		prevToolUses = toolUses
	}
	return nil
}

func anthropicMissingResults(i int, ids []string) *anthropicError {
	return anthropicInvalid("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
		i, strings.Join(ids, ", "))
}

func anthropicContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var anthropicImageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// checkAnthropicBlock applies the per-block rules of message i's block j.
func checkAnthropicBlock(i, j int, role string, b *anthropicBlock) *anthropicError {
	at := fmt.Sprintf("messages.%d.content.%d", i, j)
	switch b.Type {
	case "text":
		if b.Text == nil {
			return anthropicInvalid("%s.text: Field required", at)
		}
		if *b.Text == "" {
			return anthropicInvalid("messages: text content blocks must be non-empty")
		}
	case "image", "document":
		if role != "user" {
			return anthropicInvalid("%s: %s blocks are only allowed in user messages", at, b.Type)
		}
		if b.Source == nil {
			return anthropicInvalid("%s.source: Field required", at)
		}
		switch s := b.Source; s.Type {
		case "base64":
			if b.Type == "image" && !anthropicImageTypes[s.MediaType] {
				return anthropicInvalid("%s.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'", at)
			}
			if b.Type == "document" && s.MediaType != "application/pdf" {
				return anthropicInvalid("%s.source.base64.media_type: Input should be 'application/pdf'", at)
			}
			if _, err := base64.StdEncoding.DecodeString(s.Data); err != nil || s.Data == "" {
				return anthropicInvalid("%s.source.base64.data: invalid base64 data", at)
			}
		case "url":
			if !strings.HasPrefix(s.URL, "https://") && !strings.HasPrefix(s.URL, "http://") {
				return anthropicInvalid("%s.source.url.url: Input should be a valid URL", at)
			}
		default:
			return anthropicInvalid("%s.source: Input tag '%s' found using 'type' does not match any of the expected tags: 'base64', 'url'", at, s.Type)
		}
	case "tool_use":
		if role != "assistant" {
			return anthropicInvalid("%s: tool_use blocks are only allowed in assistant messages", at)
		}
		if b.ID == "" || b.Name == "" {
			return anthropicInvalid("%s: tool_use blocks need an id and a name", at)
		}
		if in := bytes.TrimSpace(b.Input); len(in) == 0 || in[0] != '{' {
			return anthropicInvalid("%s.input: Input should be a valid dictionary", at)
		}
	case "tool_result":
		if role != "user" {
			return anthropicInvalid("%s: tool_result blocks are only allowed in user messages", at)
		}
		if b.ToolUseID == "" {
			return anthropicInvalid("%s.tool_use_id: Field required", at)
		}
		if c := bytes.TrimSpace(b.Content); len(c) > 0 && c[0] != '"' && c[0] != '[' {
			return anthropicInvalid("%s.content: Input should be a valid string or list", at)
		}
	case "thinking", "redacted_thinking":
		if role != "assistant" {
			return anthropicInvalid("%s: %s blocks are only allowed in assistant messages", at, b.Type)
		}
	default:
		return anthropicInvalid("%s: Input tag '%s' found using 'type' does not match any of the expected tags", at, b.Type)
	}
	return nil
}

// anthropicTools checks tools and tool_choice and converts client tools into
// the OpenAI fake's function tools.
func anthropicTools(ar *anthropicRequest, req *chatRequest) *anthropicError {
	for i, t := range ar.Tools {
		if t.Type != "" && t.Type != "custom" {
			continue // a server tool (web search and the like): not the fake's to call
		}
		if !anthropicToolName.MatchString(t.Name) {
			return anthropicInvalid("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", i)
		}
		if len(t.InputSchema) == 0 {
			return anthropicInvalid("tools.%d.custom.input_schema: Field required", i)
		}
		var schema struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(t.InputSchema, &schema) != nil || schema.Type != "object" {
			return anthropicInvalid("tools.%d.custom.input_schema.type: Input should be 'object'", i)
		}
		fn := chatFunction{Name: t.Name, Parameters: t.InputSchema}
		req.Tools = append(req.Tools, chatTool{Type: "function", Function: fn})
	}
	tc := ar.ToolChoice
	if tc == nil {
		return nil
	}
	if len(ar.Tools) == 0 {
		return anthropicInvalid("tool_choice may only be specified while providing tools")
	}
	switch tc.Type {
	case "auto":
		req.ToolChoice = json.RawMessage(`"auto"`)
	case "any":
		req.ToolChoice = json.RawMessage(`"required"`)
	case "none":
		req.ToolChoice = json.RawMessage(`"none"`)
	case "tool":
		found := false
		for _, t := range req.Tools {
			found = found || t.Function.Name == tc.Name
		}
		if !found {
			return anthropicInvalid("tool_choice.tool.name: Tool '%s' not found in provided tools", tc.Name)
		}
		choice, err := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		if err != nil {
			panic(err)
		}
		req.ToolChoice = choice
	default:
		return anthropicInvalid("tool_choice: Input tag '%s' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'", tc.Type)
	}
	return nil
}

// anthropicResult is how the reply ends, in Anthropic's terms.
type anthropicResult struct {
	stopReason   string  // end_turn, max_tokens, stop_sequence or tool_use
	stopSequence *string // the stop sequence that matched, for stop_sequence
}

// anthropicOutcome works out the stop reason of rep. The OpenAI fake's "stop"
// does not say whether a stop sequence matched, which Anthropic reports, so
// the reply is generated again without stop sequences or limit and searched
// for the earliest one, as shapeText does.
func anthropicOutcome(req *chatRequest, body []byte, chunks int, rep *reply) anthropicResult {
	c := &rep.choices[0]
	switch {
	case c.call != nil:
		return anthropicResult{stopReason: "tool_use"}
	case c.finish == "length":
		return anthropicResult{stopReason: "max_tokens"}
	case len(req.stops) == 0:
		return anthropicResult{stopReason: "end_turn"}
	}
	full := *req
	full.stops, full.maxWords = nil, -1
	text := generate(&full, body, chunks).choices[0].content()
	cut, seq := -1, ""
	for _, s := range req.stops {
		if i := strings.Index(text, s); i >= 0 && (cut < 0 || i < cut) {
			cut, seq = i, s
		}
	}
	if cut < 0 {
		return anthropicResult{stopReason: "end_turn"}
	}
	return anthropicResult{stopReason: "stop_sequence", stopSequence: &seq}
}

// Response wire types.

type anthropicResponse struct {
	ID           string              `json:"id"`
	Type         string              `json:"type"`
	Role         string              `json:"role"`
	Model        string              `json:"model"`
	Content      []anthropicOutBlock `json:"content"`
	StopReason   *string             `json:"stop_reason"`
	StopSequence *string             `json:"stop_sequence"`
	Usage        anthropicUsage      `json:"usage"`
}

type anthropicOutBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// anthropicMessageID and anthropicToolUseID derive Anthropic-style ids from
// the OpenAI fake's.
func anthropicMessageID(rep *reply) string  { return "msg_" + rep.id[len("chatcmpl-"):] }
func anthropicToolUseID(c *toolCall) string { return "toolu_" + strings.TrimPrefix(c.id, "call_") }

// anthropicContent is the reply's content blocks: the text (none when empty,
// as Anthropic sends no empty text block) or the tool call.
func anthropicContent(c *choice) []anthropicOutBlock {
	if c.call != nil {
		return []anthropicOutBlock{{Type: "tool_use", ID: anthropicToolUseID(c.call), Name: c.call.name, Input: json.RawMessage(c.call.arguments)}}
	}
	if text := c.content(); text != "" {
		return []anthropicOutBlock{{Type: "text", Text: &text}}
	}
	return []anthropicOutBlock{}
}

func writeAnthropicMessage(w http.ResponseWriter, req *chatRequest, rep *reply, out anthropicResult, use anthropicUsage) {
	b, err := json.Marshal(anthropicResponse{
		ID: anthropicMessageID(rep), Type: "message", Role: "assistant", Model: req.Model,
		Content:    anthropicContent(&rep.choices[0]),
		StopReason: &out.stopReason, StopSequence: out.stopSequence,
		Usage: use,
	})
	if err != nil { // cannot happen: plain structs
		panic(err)
	}
	w.Header().Set("content-type", "application/json")
	w.Header().Set("content-length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// Stream event wire types.

type anthropicEvent struct {
	Type         string              `json:"type"`
	Message      *anthropicResponse  `json:"message,omitempty"`
	Index        *int                `json:"index,omitempty"`
	ContentBlock *anthropicOutBlock  `json:"content_block,omitempty"`
	Delta        any                 `json:"delta,omitempty"`
	Usage        *anthropicStreamUse `json:"usage,omitempty"`
}

type anthropicStreamUse struct {
	OutputTokens int `json:"output_tokens"`
}

type anthropicDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type anthropicStopDelta struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// stream writes rep as Anthropic's event sequence: message_start,
// content_block_start, ping, content_block_delta..., content_block_stop,
// message_delta, message_stop, each flushed as its own event. A reply with
// no content has no block. f's cut and stall faults interrupt it after
// their number of events, as in the OpenAI fake.
func (h *anthropicHandler) stream(w http.ResponseWriter, r *http.Request, req *chatRequest, rep *reply, out anthropicResult, f fault, use anthropicUsage) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("content-type", "text/event-stream; charset=utf-8")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}

	sent := 0
	var buf []byte
	send := func(ev *anthropicEvent) bool {
		if f.interrupt(ctx, sent) {
			return false
		}
		if sent > 0 && sleep(ctx, h.opts.ChunkDelay) != nil {
			return false
		}
		data, err := json.Marshal(ev)
		if err != nil { // cannot happen: plain structs
			panic(err)
		}
		buf = append(buf[:0], "event: "...)
		buf = append(buf, ev.Type...)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, data...)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		sent++
		return rc.Flush() == nil
	}

	c := &rep.choices[0]
	zero := 0
	start := &anthropicResponse{
		ID: anthropicMessageID(rep), Type: "message", Role: "assistant", Model: req.Model,
		Content: []anthropicOutBlock{},
		// As the real API does, message_start counts one output token so
		// far; message_delta carries the total.
		Usage: anthropicUsage{InputTokens: use.InputTokens, CacheReadInputTokens: use.CacheReadInputTokens,
			CacheCreationInputTokens: use.CacheCreationInputTokens, OutputTokens: 1},
	}
	if !send(&anthropicEvent{Type: "message_start", Message: start}) {
		return
	}
	blocks := anthropicContent(c)
	var deltas []anthropicDelta
	if len(blocks) > 0 {
		b := blocks[0]
		if c.call != nil {
			b.Input = json.RawMessage(`{}`) // the input streams as JSON fragments
			empty := ""
			deltas = append(deltas, anthropicDelta{Type: "input_json_delta", PartialJSON: &empty})
			for k := range c.call.fragments {
				deltas = append(deltas, anthropicDelta{Type: "input_json_delta", PartialJSON: &c.call.fragments[k]})
			}
		} else {
			empty := ""
			b.Text = &empty
			for k := range c.pieces {
				deltas = append(deltas, anthropicDelta{Type: "text_delta", Text: &c.pieces[k]})
			}
		}
		if !send(&anthropicEvent{Type: "content_block_start", Index: &zero, ContentBlock: &b}) {
			return
		}
	}
	if !send(&anthropicEvent{Type: "ping"}) {
		return
	}
	if len(blocks) > 0 {
		for k := range deltas {
			if !send(&anthropicEvent{Type: "content_block_delta", Index: &zero, Delta: &deltas[k]}) {
				return
			}
		}
		if !send(&anthropicEvent{Type: "content_block_stop", Index: &zero}) {
			return
		}
	}
	if !send(&anthropicEvent{Type: "message_delta",
		Delta: &anthropicStopDelta{StopReason: out.stopReason, StopSequence: out.stopSequence},
		Usage: &anthropicStreamUse{OutputTokens: rep.completionTokens}}) {
		return
	}
	send(&anthropicEvent{Type: "message_stop"})
}
