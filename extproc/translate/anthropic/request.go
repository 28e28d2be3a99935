package anthropic

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// imageMediaTypes are the base64 image types Anthropic accepts.
var imageMediaTypes = map[string]bool{
	"image/jpeg": true,
	"image/png":  true,
	"image/gif":  true,
	"image/webp": true,
}

// translator carries the state of one TranslateRequest call.
type translator struct {
	opts Options
	w    turnWriter

	// System prompt pieces: raw JSON strings, aliasing the request body,
	// with the client's cache_control of each ("" for none).
	system         []systemPiece
	systemFromList bool // some piece came from an array of parts
	// clientBreakpoints counts the client's cache_control kept.
	clientBreakpoints int
	// Automatic breakpoints decided (placeBreakpoints) before the system
	// prompt and tools are written.
	cacheSystem, cacheTools bool
	// structured is the input_schema of StructuredTool when the client
	// asked for structured output (response_format json_object or
	// json_schema), "" otherwise; structuredDesc its description.
	structured, structuredDesc string
}

// systemPiece is one text of the system prompt and its cache_control.
type systemPiece struct{ raw, cacheControl string }

// ephemeral is the automatic breakpoint, appended inside a block's object.
var ephemeral = []byte(`,"cache_control":{"type":"ephemeral"}`)

// TranslateRequest turns a validated OpenAI chat request body into an
// Anthropic Messages body for upstreamModel (TranslateChat on the body's
// parsed view).
//
// body must not be modified while TranslateRequest runs; the result does not
// alias it.
func TranslateRequest(body []byte, upstreamModel string, opts Options) ([]byte, error) {
	var f translate.ChatRequest
	if !f.Parse(body) {
		return nil, apierror.InvalidJSON()
	}
	return TranslateChat(&f, len(body), upstreamModel, opts)
}

// TranslateChat turns the parsed view of a validated OpenAI chat request
// into an Anthropic Messages body for upstreamModel; size is the request
// body's length, which the result's is close to. A parameter Anthropic
// cannot honour yields a *apierror.Error 400 naming it (param set) unless
// opts.DropUnsupported; see the package documentation for the list.
//
// The body f views must not be modified while TranslateChat runs; the
// result does not alias it.
func TranslateChat(f *translate.ChatRequest, size int, upstreamModel string, opts Options) ([]byte, error) {
	out, _, err := TranslateChatReply(f, size, upstreamModel, opts)
	return out, err
}

// TranslateChatReply is TranslateChat, also returning how the reply to the
// result is to be translated (Reply.Translate, Reply.NewStream): a request
// for structured output is answered through StructuredTool.
func TranslateChatReply(f *translate.ChatRequest, size int, upstreamModel string, opts Options) ([]byte, Reply, error) {
	t := &translator{opts: opts}
	out, err := t.translate(f, size, upstreamModel)
	if err != nil {
		return nil, Reply{}, err
	}
	return out, Reply{Structured: t.structured != ""}, nil
}

func (t *translator) translate(f *translate.ChatRequest, size int, upstreamModel string) ([]byte, error) {
	if err := t.checkUnsupported(f); err != nil {
		return nil, err
	}
	if err := t.structuredOutput(f); err != nil {
		return nil, err
	}

	// Output is about the size of the input: the conversation is copied
	// through, with a little framing per block.
	out := make([]byte, 0, size+256)
	out = append(out, `{"model":`...)
	out = appendString(out, upstreamModel)
	out = append(out, `,"max_tokens":`...)
	out = appendInt(out, t.maxTokens(f))

	out = append(out, `,"messages":[`...)
	msgStart := len(out)
	t.w.buf = out
	if err := t.messages(f.Messages); err != nil {
		return nil, err
	}
	if t.w.turns == 0 {
		return nil, apierror.InvalidParam("messages",
			"Invalid 'messages': this model's provider (Anthropic) needs at least one user, assistant or tool message with content besides system and developer messages.")
	}
	t.w.close()
	out = t.placeBreakpoints(t.w.buf, msgStart, f)
	out = append(out, ']')

	out = t.appendSystem(out)
	out, err := t.appendTools(out, f)
	if err != nil {
		return nil, err
	}
	out = appendStop(out, f.Stop)
	if out, err = t.appendSampling(out, f); err != nil {
		return nil, err
	}
	if f.Stream.Type == gjson.True {
		out = append(out, `,"stream":true`...)
	}
	user := f.User
	if user.Type != gjson.String || user.Str == "" {
		user = f.SafetyIdentifier
	}
	if user.Type == gjson.String && user.Str != "" {
		out = append(out, `,"metadata":{"user_id":`...)
		out = append(out, user.Raw...)
		out = append(out, '}')
	}
	return append(out, '}'), nil
}

// refuse returns e, or nil when unsupported parameters are to be dropped.
// It returns error, not *apierror.Error, so that the nil is a nil interface.
func (t *translator) refuse(e *apierror.Error) error {
	if t.opts.DropUnsupported {
		return nil
	}
	return e
}

func unsupportedParam(param string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest,
		Code: "unsupported_parameter", Param: param,
		Message: fmt.Sprintf("Unsupported parameter: '%s' is not supported by this model's provider (Anthropic).", param)}
}

func unsupportedValue(param, format string, args ...any) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest,
		Code: "unsupported_value", Param: param,
		Message: "Unsupported value: " + fmt.Sprintf(format, args...)}
}

// checkUnsupported refuses the parameters that change what the client gets
// back in ways Anthropic cannot reproduce (see the package documentation).
func (t *translator) checkUnsupported(f *translate.ChatRequest) error {
	var checks []*apierror.Error // at most a few; nil in the common case
	if f.N.Type == gjson.Number && f.N.Int() > 1 {
		checks = append(checks, unsupportedValue("n", "'n' must be 1 for this model; its provider (Anthropic) returns a single choice."))
	}
	for _, p := range []struct {
		name string
		v    gjson.Result
	}{{"presence_penalty", f.PresencePenalty}, {"frequency_penalty", f.FrequencyPenalty}} {
		if p.v.Type == gjson.Number && p.v.Float() != 0 {
			checks = append(checks, unsupportedParam(p.name))
		}
	}
	if f.Logprobs.Type == gjson.True {
		checks = append(checks, unsupportedParam("logprobs"))
	}
	if f.TopLogprobs.Type == gjson.Number && f.TopLogprobs.Int() > 0 {
		checks = append(checks, unsupportedParam("top_logprobs"))
	}
	if f.LogitBias.IsObject() && nonEmpty(f.LogitBias) {
		checks = append(checks, unsupportedParam("logit_bias"))
	}
	if translate.Present(f.Audio) {
		checks = append(checks, unsupportedParam("audio"))
	}
	if f.Modalities.IsArray() {
		f.Modalities.ForEach(func(_, m gjson.Result) bool {
			if m.Str == "audio" {
				checks = append(checks, unsupportedValue("modalities", "the 'audio' modality is not supported by this model's provider (Anthropic)."))
				return false
			}
			return true
		})
	}
	for _, p := range []struct {
		name string
		v    gjson.Result
	}{{"reasoning_effort", f.ReasoningEffort}, {"web_search_options", f.WebSearchOptions},
		{"functions", f.Functions}, {"function_call", f.FunctionCall}} {
		if translate.Present(p.v) {
			checks = append(checks, unsupportedParam(p.name))
		}
	}
	if len(checks) > 0 {
		if e := t.refuse(checks[0]); e != nil {
			return e
		}
	}
	return nil
}

func nonEmpty(obj gjson.Result) bool {
	found := false
	obj.ForEach(func(_, _ gjson.Result) bool { found = true; return false })
	return found
}

// maxTokens picks max_completion_tokens, then max_tokens, then the default.
func (t *translator) maxTokens(f *translate.ChatRequest) int64 {
	for _, v := range []gjson.Result{f.MaxCompletionTokens, f.MaxTokens} {
		if v.Type == gjson.Number {
			return v.Int()
		}
	}
	if t.opts.DefaultMaxTokens > 0 {
		return int64(t.opts.DefaultMaxTokens)
	}
	return defaultMaxTokens
}

// turnWriter appends Anthropic messages, merging consecutive blocks of the
// same role into one turn. A turn is opened by its first block, so messages
// that contribute no blocks leave no empty turn behind.
type turnWriter struct {
	buf   []byte
	role  string // role of the open turn; "" when none is open
	n     int    // blocks in the open turn
	turns int
	// lastCC: the last block written carries the client's cache_control.
	lastCC bool
	// prefixEnd is the offset just past the last block before the newest
	// user turn (0 when the newest user turn is the first turn), where the
	// conversation prefix ends; prefixCC is that block's lastCC.
	prefixEnd int
	prefixCC  bool
}

// block prepares buf for the next block of a role's turn.
func (w *turnWriter) block(role string) {
	if w.role != role {
		if w.role != "" && role == "user" {
			w.prefixEnd, w.prefixCC = len(w.buf), w.lastCC
		}
		w.close()
		if w.turns > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = append(w.buf, `{"role":"`...)
		w.buf = append(w.buf, role...)
		w.buf = append(w.buf, `","content":[`...)
		w.role, w.n = role, 0
		w.turns++
	}
	if w.n > 0 {
		w.buf = append(w.buf, ',')
	}
	w.n++
	w.lastCC = false
}

// cacheControl adds the client's cache_control (a raw JSON object) to the
// block just written, which ends with its closing brace.
func (w *turnWriter) cacheControl(raw string) {
	w.buf = append(w.buf[:len(w.buf)-1], `,"cache_control":`...)
	w.buf = append(w.buf, raw...)
	w.buf = append(w.buf, '}')
	w.lastCC = true
}

func (w *turnWriter) close() {
	if w.role != "" {
		w.buf = append(w.buf, "]}"...)
		w.role = ""
	}
}

// text appends a text block; raw is a non-empty JSON string.
func (w *turnWriter) text(role, raw string) {
	w.block(role)
	w.buf = append(w.buf, `{"type":"text","text":`...)
	w.buf = append(w.buf, raw...)
	w.buf = append(w.buf, '}')
}

// message is one OpenAI message's fields, collected in one pass.
type message struct {
	role, content, toolCalls, toolCallID, functionCall gjson.Result
}

func (t *translator) messages(msgs gjson.Result) error {
	if !msgs.IsArray() {
		return apierror.MissingParam("messages")
	}
	var err error
	i := 0
	msgs.ForEach(func(_, raw gjson.Result) bool {
		var m message
		raw.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "role":
				m.role = v
			case "content":
				m.content = v
			case "tool_calls":
				m.toolCalls = v
			case "tool_call_id":
				m.toolCallID = v
			case "function_call":
				m.functionCall = v
			}
			return true
		})
		err = t.message(i, &m)
		i++
		return err == nil
	})
	return err
}

func (t *translator) message(i int, m *message) error {
	switch role := m.role.Str; role {
	case "system", "developer":
		return t.systemMessage(i, m.content)
	case "user":
		return t.content(i, "user", m.content)
	case "assistant":
		if err := t.content(i, "assistant", m.content); err != nil {
			return err
		}
		if translate.Present(m.functionCall) {
			if e := t.refuse(unsupportedParam(fmt.Sprintf("messages[%d].function_call", i))); e != nil {
				return e
			}
		}
		return t.toolCalls(i, m.toolCalls)
	case "tool":
		return t.toolResult(i, m)
	case "function":
		return t.refuse(unsupportedValue(fmt.Sprintf("messages[%d].role", i),
			"the deprecated 'function' role is not supported by this model's provider (Anthropic); use tool messages."))
	default:
		return apierror.InvalidParam(fmt.Sprintf("messages[%d].role", i), "Invalid value for 'messages[%d].role': '%s'.", i, role)
	}
}

// systemMessage collects a system or developer message's text for the
// top-level system prompt.
func (t *translator) systemMessage(i int, content gjson.Result) error {
	switch {
	case content.Type == gjson.String:
		if content.Raw != `""` {
			t.system = append(t.system, systemPiece{raw: content.Raw})
		}
	case content.IsArray():
		t.systemFromList = true
		j := 0
		var err error
		content.ForEach(func(_, part gjson.Result) bool {
			if typ := part.Get("type").Str; typ != "text" {
				err = apierror.InvalidParam(fmt.Sprintf("messages[%d].content[%d].type", i, j),
					"Invalid content part type '%s' in a system message: only text is allowed.", typ)
				return false
			}
			if txt := part.Get("text"); txt.Type == gjson.String && txt.Raw != `""` {
				sp := systemPiece{raw: txt.Raw}
				if cc := part.Get("cache_control"); cc.IsObject() {
					sp.cacheControl = cc.Raw
					t.clientBreakpoints++
				}
				t.system = append(t.system, sp)
			}
			j++
			return true
		})
		return err
	}
	return nil
}

// content appends a user or assistant message's content: a string or an array
// of parts.
func (t *translator) content(i int, role string, content gjson.Result) error {
	switch {
	case content.Type == gjson.String:
		if content.Raw != `""` {
			t.w.text(role, content.Raw)
		}
		return nil
	case !content.IsArray():
		return nil // null or absent: an assistant turn with only tool calls
	}
	var err error
	j := 0
	content.ForEach(func(_, part gjson.Result) bool {
		err = t.part(i, j, role, part)
		j++
		return err == nil
	})
	return err
}

// contentPart is one content part's members, collected in one pass (an
// image part can hold megabytes of base64).
type contentPart struct {
	typ, text, refusal, imageURL, file, cacheControl gjson.Result
}

func (t *translator) part(i, j int, role string, raw gjson.Result) error {
	param := func(suffix string) string { return fmt.Sprintf("messages[%d].content[%d]%s", i, j, suffix) }
	var part contentPart
	raw.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			part.typ = v
		case "text":
			part.text = v
		case "refusal":
			part.refusal = v
		case "image_url":
			part.imageURL = v
		case "file":
			part.file = v
		case "cache_control":
			part.cacheControl = v
		}
		return true
	})
	before := len(t.w.buf)
	switch typ := part.typ.Str; typ {
	case "text":
		if txt := part.text; txt.Type == gjson.String && txt.Raw != `""` {
			t.w.text(role, txt.Raw)
		}
	case "refusal": // an earlier assistant refusal, replayed as what was said
		if txt := part.refusal; txt.Type == gjson.String && txt.Raw != `""` {
			t.w.text(role, txt.Raw)
		}
	case "image_url":
		if err := t.image(param(".image_url.url"), role, part.imageURL); err != nil {
			return err
		}
	case "file":
		if err := t.file(param(".file"), role, part.file); err != nil {
			return err
		}
	case "input_audio":
		return t.refuse(unsupportedValue(param(".type"), "audio input is not supported by this model's provider (Anthropic)."))
	default:
		return apierror.InvalidParam(param(".type"), "Invalid content part type '%s'.", typ)
	}
	// The client's breakpoint stays on the block the part became (none
	// when the part was dropped or empty).
	if part.cacheControl.IsObject() && len(t.w.buf) > before {
		t.w.cacheControl(part.cacheControl.Raw)
		t.clientBreakpoints++
	}
	return nil
}

// image appends an image block: a data: URL becomes a base64 source, an
// http(s) URL a url source.
func (t *translator) image(param, role string, iu gjson.Result) error {
	url := iu
	if iu.IsObject() {
		url = iu.Get("url")
	}
	// url.Str aliases the body unless the string has escapes, so slicing it
	// copies nothing even for a multi-megabyte image.
	s := url.Str
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		header, data, ok := strings.Cut(rest, ",")
		mediaType, base64, _ := strings.Cut(header, ";")
		if !ok || base64 != "base64" {
			return apierror.InvalidParam(param, "Invalid image URL: a data URL must be base64 encoded (data:<media type>;base64,<data>).")
		}
		if mediaType == "image/jpg" { // a common misspelling Anthropic refuses
			mediaType = "image/jpeg"
		}
		if !imageMediaTypes[mediaType] {
			return t.refuse(unsupportedValue(param, "image media type '%s' is not supported by this model's provider (Anthropic); use image/jpeg, image/png, image/gif or image/webp.", mediaType))
		}
		t.w.block(role)
		b := append(t.w.buf, `{"type":"image","source":{"type":"base64","media_type":"`...)
		b = append(b, mediaType...)
		b = append(b, `","data":`...)
		b = appendString(b, data) // a scan and one copy: base64 needs no escapes
		t.w.buf = append(b, "}}"...)
		return nil
	}
	if strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") {
		t.w.block(role)
		t.w.buf = append(t.w.buf, `{"type":"image","source":{"type":"url","url":`...)
		t.w.buf = append(t.w.buf, url.Raw...)
		t.w.buf = append(t.w.buf, "}}"...)
		return nil
	}
	return apierror.InvalidParam(param, "Invalid image URL: expected an http(s) URL or a base64 data URL.")
}

// file appends a PDF sent inline as a document block. Files by id live in
// OpenAI's file store, which Anthropic cannot read.
func (t *translator) file(param, role string, file gjson.Result) error {
	const pdf = "data:application/pdf;base64,"
	data, ok := strings.CutPrefix(file.Get("file_data").Str, pdf)
	if !ok {
		return t.refuse(unsupportedValue(param, "only PDF files sent inline as file_data (%s...) are supported by this model's provider (Anthropic).", pdf))
	}
	t.w.block(role)
	b := append(t.w.buf, `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":`...)
	b = appendString(b, data)
	t.w.buf = append(b, "}}"...)
	return nil
}

// toolCalls appends an assistant message's tool calls as tool_use blocks.
func (t *translator) toolCalls(i int, calls gjson.Result) error {
	if !calls.IsArray() {
		return nil
	}
	var err error
	j := 0
	calls.ForEach(func(_, call gjson.Result) bool {
		err = t.toolCall(i, j, call)
		j++
		return err == nil
	})
	return err
}

func (t *translator) toolCall(i, j int, call gjson.Result) error {
	param := func(suffix string) string { return fmt.Sprintf("messages[%d].tool_calls[%d]%s", i, j, suffix) }
	if typ := call.Get("type").Str; typ != "" && typ != "function" {
		return t.refuse(unsupportedValue(param(".type"), "tool calls of type '%s' are not supported by this model's provider (Anthropic).", typ))
	}
	id := call.Get("id")
	fn := call.Get("function")
	name := fn.Get("name")
	if id.Type != gjson.String || name.Type != gjson.String {
		return apierror.InvalidParam(param(""), "Invalid tool call: 'id' and 'function.name' are required.")
	}
	// arguments is JSON text inside a JSON string; Anthropic wants the object
	// itself. Unescaping it is unavoidable, but it is small.
	args := strings.TrimSpace(fn.Get("arguments").Str)
	if args == "" {
		args = "{}"
	} else if args[0] != '{' || !gjson.Valid(args) {
		return apierror.InvalidParam(param(".function.arguments"),
			"Invalid 'arguments': expected a JSON object for this model's provider (Anthropic).")
	}
	t.w.block("assistant")
	b := append(t.w.buf, `{"type":"tool_use","id":`...)
	b = append(b, id.Raw...)
	b = append(b, `,"name":`...)
	b = append(b, name.Raw...)
	b = append(b, `,"input":`...)
	b = append(b, args...)
	t.w.buf = append(b, '}')
	return nil
}

// toolResult appends a tool message as a tool_result block of a user turn;
// consecutive tool messages share the turn.
func (t *translator) toolResult(i int, m *message) error {
	if m.toolCallID.Type != gjson.String {
		return apierror.MissingParam(fmt.Sprintf("messages[%d].tool_call_id", i))
	}
	t.w.block("user")
	b := append(t.w.buf, `{"type":"tool_result","tool_use_id":`...)
	b = append(b, m.toolCallID.Raw...)
	switch c := m.content; {
	case c.Type == gjson.String && c.Raw != `""`:
		b = append(b, `,"content":`...)
		b = append(b, c.Raw...)
	case c.IsArray():
		n := 0
		var err error
		j := 0
		c.ForEach(func(_, part gjson.Result) bool {
			if typ := part.Get("type").Str; typ != "text" {
				err = apierror.InvalidParam(fmt.Sprintf("messages[%d].content[%d].type", i, j),
					"Invalid content part type '%s' in a tool message: only text is allowed.", typ)
				return false
			}
			j++
			txt := part.Get("text")
			if txt.Type != gjson.String || txt.Raw == `""` {
				return true
			}
			if n == 0 {
				b = append(b, `,"content":[`...)
			} else {
				b = append(b, ',')
			}
			n++
			b = append(b, `{"type":"text","text":`...)
			b = append(b, txt.Raw...)
			b = append(b, '}')
			return true
		})
		if err != nil {
			return err
		}
		if n > 0 {
			b = append(b, ']')
		}
	}
	t.w.buf = append(b, '}')
	return nil
}

// appendSystem appends the collected system prompt: the string itself when it
// came from one string message, text blocks otherwise.
//
// A breakpoint (the client's, or cacheSystem's on the last block) needs
// blocks: a string system prompt becomes one text block then.
func (t *translator) appendSystem(out []byte) []byte {
	switch {
	case len(t.system) == 0:
		return out
	case len(t.system) == 1 && !t.systemFromList && !t.cacheSystem:
		out = append(out, `,"system":`...)
		return append(out, t.system[0].raw...)
	}
	out = append(out, `,"system":[`...)
	for k, p := range t.system {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"type":"text","text":`...)
		out = append(out, p.raw...)
		if p.cacheControl != "" {
			out = append(out, `,"cache_control":`...)
			out = append(out, p.cacheControl...)
		} else if t.cacheSystem && k == len(t.system)-1 {
			out = append(out, ephemeral...)
		}
		out = append(out, '}')
	}
	return append(out, ']')
}

// appendTools appends tools and tool_choice. Both are left out when no tool
// survives, as Anthropic refuses a tool_choice without tools. A request for
// structured output adds StructuredTool after the client's tools (after
// their cache breakpoint, as its schema varies more than they do) and
// chooses it (appendStructuredChoice).
func (t *translator) appendTools(out []byte, f *translate.ChatRequest) ([]byte, error) {
	if !f.Tools.IsArray() && t.structured == "" {
		return out, nil
	}
	start := len(out)
	out = append(out, `,"tools":[`...)
	n := 0
	var err error
	i := 0
	f.Tools.ForEach(func(_, tool gjson.Result) bool {
		defer func() { i++ }()
		if typ := tool.Get("type").Str; typ != "function" {
			err = t.refuse(unsupportedValue(fmt.Sprintf("tools[%d].type", i),
				"tools of type '%s' are not supported by this model's provider (Anthropic).", typ))
			return err == nil
		}
		fn := tool.Get("function")
		name := fn.Get("name")
		if name.Type != gjson.String {
			err = apierror.MissingParam(fmt.Sprintf("tools[%d].function.name", i))
			return false
		}
		if t.structured != "" && name.Str == StructuredTool {
			err = apierror.InvalidParam(fmt.Sprintf("tools[%d].function.name", i),
				"Invalid 'tools[%d].function.name': '%s' is reserved for structured output (response_format) with this model's provider (Anthropic).", i, StructuredTool)
			return false
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, `{"name":`...)
		out = append(out, name.Raw...)
		if d := fn.Get("description"); d.Type == gjson.String && d.Raw != `""` {
			out = append(out, `,"description":`...)
			out = append(out, d.Raw...)
		}
		out = append(out, `,"input_schema":`...)
		out = appendSchema(out, fn.Get("parameters"))
		out = append(out, '}')
		return true
	})
	if err != nil {
		return nil, err
	}
	if n == 0 && t.structured == "" {
		return out[:start], nil
	}
	if t.cacheTools && n > 0 { // on the last tool: before its closing brace
		out = append(append(out[:len(out)-1], ephemeral...), '}')
	}
	if t.structured == "" {
		out = append(out, ']')
		return t.appendToolChoice(out, f)
	}
	if n > 0 {
		out = append(out, ',')
	}
	out = append(out, `{"name":"`+StructuredTool+`","description":`...)
	out = append(out, t.structuredDesc...)
	out = append(out, `,"input_schema":`...)
	out = append(out, t.structured...)
	out = append(out, "}]"...)
	return t.appendStructuredChoice(out, f, n)
}

// emptySchema is the input_schema of a function without parameters:
// Anthropic requires one, of type object.
const emptySchema = `{"type":"object","properties":{}}`

func appendSchema(out []byte, params gjson.Result) []byte {
	if !params.IsObject() || !nonEmpty(params) {
		return append(out, emptySchema...)
	}
	if params.Get("type").Exists() {
		return append(out, params.Raw...)
	}
	// OpenAI tolerates a schema without "type"; Anthropic wants "object".
	out = append(out, `{"type":"object",`...)
	return append(out, strings.TrimSpace(params.Raw)[1:]...)
}

func (t *translator) appendToolChoice(out []byte, f *translate.ChatRequest) ([]byte, error) {
	choice := "" // Anthropic's type
	var name string
	switch tc := f.ToolChoice; {
	case tc.Type == gjson.String:
		switch tc.Str {
		case "auto":
			choice = "auto"
		case "required":
			choice = "any"
		case "none":
			// Tools stay: earlier turns may hold tool_use blocks.
			choice = "none"
		default:
			return nil, apierror.InvalidParam("tool_choice", "Invalid value for 'tool_choice': '%s'.", tc.Str)
		}
	case tc.IsObject():
		switch typ := tc.Get("type").Str; typ {
		case "function":
			n := tc.Get("function.name")
			if n.Type != gjson.String {
				return nil, apierror.MissingParam("tool_choice.function.name")
			}
			choice, name = "tool", n.Raw
		default:
			if e := t.refuse(unsupportedValue("tool_choice",
				"'tool_choice' of type '%s' is not supported by this model's provider (Anthropic).", typ)); e != nil {
				return nil, e
			}
			choice = "auto"
		}
	}
	noParallel := f.ParallelToolCalls.Type == gjson.False && choice != "none"
	if choice == "" {
		if !noParallel {
			return out, nil // Anthropic's default is auto, as OpenAI's is
		}
		choice = "auto"
	}
	out = append(out, `,"tool_choice":{"type":"`...)
	out = append(out, choice...)
	out = append(out, '"')
	if name != "" {
		out = append(out, `,"name":`...)
		out = append(out, name...)
	}
	if noParallel {
		out = append(out, `,"disable_parallel_tool_use":true`...)
	}
	return append(out, '}'), nil
}

// appendStop appends stop (a string or an array) as stop_sequences, leaving
// out empty strings, which would stop before the first token.
func appendStop(out []byte, stop gjson.Result) []byte {
	n := 0
	add := func(s gjson.Result) {
		if s.Type != gjson.String || s.Raw == `""` {
			return
		}
		if n == 0 {
			out = append(out, `,"stop_sequences":[`...)
		} else {
			out = append(out, ',')
		}
		n++
		out = append(out, s.Raw...)
	}
	if stop.IsArray() {
		stop.ForEach(func(_, s gjson.Result) bool { add(s); return true })
	} else {
		add(stop)
	}
	if n > 0 {
		out = append(out, ']')
	}
	return out
}

// appendSampling appends temperature and top_p. OpenAI's temperature runs to
// 2, Anthropic's to 1: values above 1 are refused rather than rescaled, so a
// client never gets a different temperature than it asked for without
// knowing; with DropUnsupported they become 1.
func (t *translator) appendSampling(out []byte, f *translate.ChatRequest) ([]byte, error) {
	if temp := f.Temperature; temp.Type == gjson.Number {
		raw := temp.Raw
		if temp.Float() > 1 {
			if e := t.refuse(unsupportedValue("temperature",
				"'temperature' must be between 0 and 1 for this model's provider (Anthropic); got %s.",
				strconv.FormatFloat(temp.Float(), 'g', -1, 64))); e != nil {
				return nil, e
			}
			raw = "1"
		}
		out = append(out, `,"temperature":`...)
		out = append(out, raw...)
	}
	if f.TopP.Type == gjson.Number {
		out = append(out, `,"top_p":`...)
		out = append(out, f.TopP.Raw...)
	}
	return out, nil
}

// placeBreakpoints decides the automatic cache_control breakpoints once the
// messages are written (out ends with them; they start at msgStart), adds
// the conversation's and returns out.
//
// Anthropic caches the prefix up to a breakpoint, in the order tools, system,
// messages, and only from CacheMinTokens tokens (estimated at 4 bytes a
// token, over the request's own JSON). Candidates, in order of value while
// the 4 breakpoints Anthropic allows (less the client's) last:
//
//   - the last system block: the prompt every conversation shares;
//   - the last block before the newest user turn: the conversation so far,
//     which the next turn repeats (a breakpoint on the newest turn itself
//     would mostly be written and never read once the conversation ends);
//   - the last tool: tools alone, for when the system prompt varies.
//
// A block that already carries the client's cache_control gets no second one.
func (t *translator) placeBreakpoints(out []byte, msgStart int, f *translate.ChatRequest) []byte {
	budget := maxBreakpoints - t.clientBreakpoints
	if t.opts.NoCacheControl || budget <= 0 {
		return out
	}
	minTokens := t.opts.CacheMinTokens
	if minTokens <= 0 {
		minTokens = defaultCacheMinTokens
	}
	minBytes := minTokens * bytesPerToken
	tools := 0
	if f.Tools.IsArray() {
		tools = len(f.Tools.Raw)
	}
	system := 0
	for _, p := range t.system {
		system += len(p.raw)
	}
	if len(t.system) > 0 && t.system[len(t.system)-1].cacheControl == "" && tools+system >= minBytes {
		t.cacheSystem = true
		budget--
	}
	if end := t.w.prefixEnd; budget > 0 && end > msgStart && !t.w.prefixCC && tools+system+end-msgStart >= minBytes {
		// Inside the block's object, before its closing brace: only the
		// newest turn after it moves.
		out = slices.Insert(out, end-1, ephemeral...)
		budget--
	}
	if budget > 0 && tools >= minBytes {
		t.cacheTools = true
	}
	return out
}
