package gemini

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Options tunes request translation.
type Options struct {
	// DropUnsupported makes TranslateRequest drop what Gemini cannot honour
	// (parameters, content parts, tools, schema keywords) instead of
	// rejecting the request with a 400 naming it.
	DropUnsupported bool
}

// maxStopSequences is Gemini's limit on stopSequences (OpenAI allows 4).
const maxStopSequences = 5

// TranslateRequest turns an OpenAI chat completion request body into a
// Gemini generateContent request body (TranslateChat on the body's parsed
// view).
func TranslateRequest(body []byte, opts Options) ([]byte, error) {
	if !gjson.ValidBytes(body) {
		return nil, apierror.InvalidJSON()
	}
	var f translate.ChatRequest
	if !f.Parse(body) {
		return nil, &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type",
			Message: "The request body must be a JSON object."}
	}
	return TranslateChat(&f, len(body), opts)
}

// TranslateChat turns the parsed view of an OpenAI chat completion request
// into a Gemini generateContent request body; size is the request body's
// length, which the result's is close to. The body is expected to have
// passed the gateway's OpenAI validation; what Gemini cannot honour is a 400
// *apierror.Error naming the parameter, unless opts.DropUnsupported. The
// mapping is described in the package documentation.
func TranslateChat(f *translate.ChatRequest, size int, opts Options) ([]byte, error) {
	r := request{opts: opts}
	if err := r.checkMembers(f); err != nil {
		return nil, err
	}
	r.f.messages, r.f.tools, r.f.toolChoice, r.f.responseFormat, r.f.stop = f.Messages, f.Tools, f.ToolChoice, f.ResponseFormat, f.Stop
	r.f.temperature, r.f.topP, r.f.n, r.f.presencePenalty, r.f.frequencyPenalty, r.f.seed = f.Temperature, f.TopP, f.N, f.PresencePenalty, f.FrequencyPenalty, f.Seed
	r.f.maxTokens, r.f.maxCompletionTokens, r.f.reasoningEffort = f.MaxTokens, f.MaxCompletionTokens, f.ReasoningEffort
	if !r.f.messages.Exists() || r.f.messages.Type == gjson.Null {
		return nil, apierror.MissingParam("messages")
	}
	if !r.f.messages.IsArray() {
		return nil, apierror.InvalidParam("messages", "Invalid type for 'messages': expected an array.")
	}

	// The output is about the size of the input: most of both is message
	// content, copied as is.
	r.out = make([]byte, 0, size+512)
	r.out = append(r.out, `{"contents":[`...)
	i := 0
	var err error
	r.f.messages.ForEach(func(_, m gjson.Result) bool {
		err = r.message(i, m)
		i++
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if r.open {
		r.out = append(r.out, "]}"...)
	}
	if r.turns == 0 {
		if len(r.system) == 0 {
			return nil, apierror.InvalidParam("messages", "Invalid 'messages': Gemini models need at least one message with content.")
		}
		r.out = append(r.out, `{"role":"user","parts":[`...)
		r.out = append(r.out, r.system...)
		r.out = append(r.out, "]}"...)
		r.system = r.system[:0]
	}
	r.out = append(r.out, ']')
	if len(r.system) > 0 {
		r.out = append(r.out, `,"systemInstruction":{"parts":[`...)
		r.out = append(r.out, r.system...)
		r.out = append(r.out, "]}"...)
	}
	if err := r.tools(); err != nil {
		return nil, err
	}
	if err := r.generationConfig(); err != nil {
		return nil, err
	}
	return append(r.out, '}'), nil
}

// request is the state of one translation.
type request struct {
	opts Options
	out  []byte
	// system holds the systemInstruction parts, comma-separated: system
	// messages may come anywhere, the instruction goes after the contents.
	system []byte

	// f holds the members translated after the messages, copied from the
	// view: r lives on the heap, where the view need not.
	f struct {
		messages, tools, toolChoice, responseFormat, stop             gjson.Result
		temperature, topP, n, presencePenalty, frequencyPenalty, seed gjson.Result
		maxTokens, maxCompletionTokens, reasoningEffort               gjson.Result
	}

	// The turn being written. Parts are written as messages are read; a turn
	// is opened lazily by the first part that needs it, so a message without
	// content never leaves an empty turn (which Gemini rejects), and closed
	// when a part needs a different one.
	turns    int
	open     bool
	role     string // role of the open turn
	tool     bool   // the open turn holds function responses
	parts    int    // parts in the open turn
	wantRole string
	wantTool bool

	// callNames maps tool call ids to function names: OpenAI tool results
	// name the call, Gemini function responses the function.
	callNames map[string]string
}

// checkMembers refuses the top-level members Gemini cannot honour (unless
// they are to be dropped), reporting the first in the order the client wrote
// them. The other members are translated, or have no effect on the answer
// (model, stream, stream_options, user, safety_identifier,
// prompt_cache_key, metadata) or are carried by the path.
func (r *request) checkMembers(f *translate.ChatRequest) error {
	if r.opts.DropUnsupported {
		return nil
	}
	var first error
	at := -1
	refuse := func(v gjson.Result, err error) {
		if at < 0 || v.Index < at {
			first, at = err, v.Index
		}
	}
	// Accepted in the values that ask for Gemini's behaviour anyway.
	for _, m := range []struct {
		name string
		v    gjson.Result
	}{{"store", f.Store}, {"logprobs", f.Logprobs}} {
		if translate.Present(m.v) && m.v.Type != gjson.False {
			refuse(m.v, r.unsupported(m.name))
		}
	}
	if v := f.ParallelToolCalls; translate.Present(v) && v.Type != gjson.True {
		refuse(v, r.unsupportedValue("parallel_tool_calls", "Gemini models cannot be kept from calling functions in parallel."))
	}
	if v := f.ServiceTier; translate.Present(v) && v.Str != "auto" && v.Str != "default" {
		refuse(v, r.unsupportedValue("service_tier", "Gemini models only offer the default service tier."))
	}
	if v := f.LogitBias; translate.Present(v) && !(v.IsObject() && isEmpty(v)) {
		refuse(v, r.unsupported("logit_bias"))
	}
	if v := f.TopLogprobs; translate.Present(v) && v.Int() != 0 {
		refuse(v, r.unsupported("top_logprobs"))
	}
	if v := f.Modalities; translate.Present(v) && !(v.IsArray() && textOnly(v)) {
		refuse(v, r.unsupportedValue("modalities", "Gemini chat translation supports text output only."))
	}
	// Members Gemini has no equivalent for, whatever their value.
	for _, m := range []struct {
		name string
		v    gjson.Result
	}{{"audio", f.Audio}, {"web_search_options", f.WebSearchOptions}, {"functions", f.Functions},
		{"function_call", f.FunctionCall}, {f.UnknownKey, f.Unknown}} {
		if m.v.Exists() {
			refuse(m.v, r.unsupported(m.name))
		}
	}
	return first
}

func isEmpty(v gjson.Result) bool {
	empty := true
	v.ForEach(func(_, _ gjson.Result) bool { empty = false; return false })
	return empty
}

func textOnly(v gjson.Result) bool {
	ok := true
	v.ForEach(func(_, m gjson.Result) bool { ok = m.Str == "text"; return ok })
	return ok
}

// unsupported rejects a parameter Gemini has no equivalent for, or returns
// nil when it is to be dropped.
func (r *request) unsupported(param string) error {
	if r.opts.DropUnsupported {
		return nil
	}
	return &apierror.Error{Status: http.StatusBadRequest, Code: "unsupported_parameter", Param: param,
		Message: fmt.Sprintf("Unsupported parameter: '%s' is not supported with Gemini models.", param)}
}

// unsupportedValue rejects a value Gemini cannot honour, or returns nil when
// it is to be dropped.
func (r *request) unsupportedValue(param, why string) error {
	if r.opts.DropUnsupported {
		return nil
	}
	return &apierror.Error{Status: http.StatusBadRequest, Code: "unsupported_value", Param: param,
		Message: fmt.Sprintf("Unsupported value for '%s': %s", param, why)}
}

func msgParam(i int, rest string) string { return "messages[" + strconv.Itoa(i) + "]" + rest }

func partParam(i, j int, rest string) string {
	return "messages[" + strconv.Itoa(i) + "].content[" + strconv.Itoa(j) + "]" + rest
}

// begin sets the turn the following parts belong to.
func (r *request) begin(role string, tool bool) { r.wantRole, r.wantTool = role, tool }

// part prepares r.out for one more part of the wanted turn.
func (r *request) part() {
	if !r.open || r.role != r.wantRole || r.tool != r.wantTool {
		if r.open {
			r.out = append(r.out, "]}"...)
		}
		if r.turns > 0 {
			r.out = append(r.out, ',')
		}
		r.out = append(r.out, `{"role":"`...)
		r.out = append(r.out, r.wantRole...)
		r.out = append(r.out, `","parts":[`...)
		r.open, r.role, r.tool, r.parts = true, r.wantRole, r.wantTool, 0
		r.turns++
	}
	if r.parts > 0 {
		r.out = append(r.out, ',')
	}
	r.parts++
}

// textPart appends a text part from a JSON string literal; empty text is
// skipped, as Gemini rejects it.
func (r *request) textPart(raw string) {
	if raw == `""` {
		return
	}
	r.part()
	r.out = append(r.out, `{"text":`...)
	r.out = append(r.out, raw...)
	r.out = append(r.out, '}')
}

func (r *request) systemPart(raw string) {
	if raw == `""` {
		return
	}
	if len(r.system) > 0 {
		r.system = append(r.system, ',')
	}
	r.system = append(r.system, `{"text":`...)
	r.system = append(r.system, raw...)
	r.system = append(r.system, '}')
}

func (r *request) message(i int, m gjson.Result) error {
	if !m.IsObject() {
		return apierror.InvalidParam(msgParam(i, ""), "Invalid type for 'messages[%d]': expected an object.", i)
	}
	// One pass over the members: content can be megabytes, and each
	// gjson.Get would scan past it again.
	var role, content, toolCalls, toolCallID, name, functionCall, audio gjson.Result
	m.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "role":
			role = v
		case "content":
			content = v
		case "tool_calls":
			toolCalls = v
		case "tool_call_id":
			toolCallID = v
		case "name":
			name = v
		case "function_call":
			functionCall = v
		case "audio":
			audio = v
		}
		return true
	})
	switch role.Str {
	case "system", "developer":
		return r.systemContent(i, content)
	case "user":
		r.begin("user", false)
		return r.userContent(i, content)
	case "assistant":
		r.begin("model", false)
		if functionCall.Exists() && functionCall.Type != gjson.Null {
			if err := r.unsupported(msgParam(i, ".function_call")); err != nil {
				return err
			}
		}
		if audio.Exists() && audio.Type != gjson.Null {
			if err := r.unsupported(msgParam(i, ".audio")); err != nil {
				return err
			}
		}
		if err := r.assistantContent(i, content); err != nil {
			return err
		}
		return r.toolCalls(i, toolCalls)
	case "tool":
		if toolCallID.Type != gjson.String {
			return apierror.MissingParam(msgParam(i, ".tool_call_id"))
		}
		fn, ok := r.callNames[toolCallID.Str]
		if !ok {
			return apierror.InvalidParam(msgParam(i, ".tool_call_id"),
				"Invalid 'messages[%d].tool_call_id': no earlier assistant message has a tool call with id '%s'.", i, toolCallID.Str)
		}
		r.begin("user", true)
		return r.functionResponse(i, fn, content)
	case "function": // the deprecated predecessor of tool messages
		if name.Type != gjson.String || name.Str == "" {
			return apierror.MissingParam(msgParam(i, ".name"))
		}
		r.begin("user", true)
		return r.functionResponse(i, name.Str, content)
	}
	return apierror.InvalidParam(msgParam(i, ".role"), "Invalid value for 'messages[%d].role': %s.", i, role.Raw)
}

func (r *request) systemContent(i int, content gjson.Result) error {
	switch {
	case content.Type == gjson.String:
		r.systemPart(content.Raw)
	case content.IsArray():
		j := 0
		var err error
		content.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("type").Str; t != "text" {
				// Gemini's system instruction holds text only.
				err = r.unsupportedValue(partParam(i, j, ".type"), "Gemini system instructions can only contain text.")
			} else if text := p.Get("text"); text.Type == gjson.String {
				r.systemPart(text.Raw)
			}
			j++
			return err == nil
		})
		return err
	}
	return nil
}

func (r *request) assistantContent(i int, content gjson.Result) error {
	switch {
	case content.Type == gjson.String:
		r.textPart(content.Raw)
	case content.IsArray():
		j := 0
		var err error
		content.ForEach(func(_, p gjson.Result) bool {
			switch p.Get("type").Str {
			case "text":
				if text := p.Get("text"); text.Type == gjson.String {
					r.textPart(text.Raw)
				}
			case "refusal":
				if text := p.Get("refusal"); text.Type == gjson.String {
					r.textPart(text.Raw)
				}
			default:
				err = r.unsupportedValue(partParam(i, j, ".type"), "Gemini models accept only text in assistant messages.")
			}
			j++
			return err == nil
		})
		return err
	}
	return nil
}

func (r *request) userContent(i int, content gjson.Result) error {
	switch {
	case content.Type == gjson.String:
		r.textPart(content.Raw)
		return nil
	case !content.IsArray():
		return nil
	}
	j := 0
	var err error
	content.ForEach(func(_, p gjson.Result) bool {
		err = r.userPart(i, j, p)
		j++
		return err == nil
	})
	return err
}

func (r *request) userPart(i, j int, p gjson.Result) error {
	var typ, text, image, audio, file gjson.Result
	p.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "text":
			text = v
		case "image_url":
			image = v
		case "input_audio":
			audio = v
		case "file":
			file = v
		}
		return true
	})
	switch typ.Str {
	case "text":
		if text.Type == gjson.String {
			r.textPart(text.Raw)
		}
		return nil
	case "image_url":
		url := image
		if image.IsObject() {
			url = image.Get("url")
		}
		if url.Type != gjson.String {
			return apierror.MissingParam(partParam(i, j, ".image_url.url"))
		}
		return r.mediaPart(url, i, j, ".image_url.url", "image/jpeg")
	case "input_audio":
		data, format := audio.Get("data"), audio.Get("format")
		if data.Type != gjson.String {
			return apierror.MissingParam(partParam(i, j, ".input_audio.data"))
		}
		var mime string
		switch format.Str {
		case "wav":
			mime = "audio/wav"
		case "mp3":
			mime = "audio/mp3"
		default:
			return apierror.InvalidParam(partParam(i, j, ".input_audio.format"),
				"Invalid value for 'input_audio.format': expected 'wav' or 'mp3'.")
		}
		r.part()
		r.out = append(r.out, `{"inlineData":{"mimeType":"`...)
		r.out = append(r.out, mime...)
		r.out = append(r.out, `","data":`...)
		r.out = append(r.out, data.Raw...)
		r.out = append(r.out, "}}"...)
		return nil
	case "file":
		if id := file.Get("file_id"); id.Exists() && id.Type != gjson.Null {
			return r.unsupportedValue(partParam(i, j, ".file.file_id"),
				"Gemini models cannot read files uploaded to OpenAI; send the content in 'file_data'.")
		}
		data := file.Get("file_data")
		if data.Type != gjson.String {
			return apierror.MissingParam(partParam(i, j, ".file.file_data"))
		}
		if strings.HasPrefix(inner(data.Raw), "data:") {
			return r.mediaPart(data, i, j, ".file.file_data", "application/pdf")
		}
		// Bare base64, as some clients send: the type comes from the name.
		mime := mimeFromName(file.Get("filename").Str, "application/pdf")
		r.part()
		r.out = append(r.out, `{"inlineData":{"mimeType":"`...)
		r.out = append(r.out, mime...)
		r.out = append(r.out, `","data":`...)
		r.out = append(r.out, data.Raw...)
		r.out = append(r.out, "}}"...)
		return nil
	}
	return r.unsupportedValue(partParam(i, j, ".type"), fmt.Sprintf("content parts of type %s are not supported with Gemini models.", typ.Raw))
}

// mediaPart appends an inlineData part for a base64 data: URL, or a fileData
// part for an http(s) or gs:// URL. Most data URLs are copied straight from
// the raw JSON without unescaping; only one with escapes (some encoders write
// "\/" for the slashes of base64) is decoded and re-encoded.
func (r *request) mediaPart(url gjson.Result, i, j int, field, defaultMime string) error {
	s := inner(url.Raw)
	escaped := strings.IndexByte(s, '\\') >= 0
	if escaped {
		s = url.Str
	}
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			return apierror.InvalidParam(partParam(i, j, field),
				"Invalid '%s': data URLs must be base64-encoded (data:<type>;base64,<data>).", partParam(i, j, field))
		}
		mime, _, _ := strings.Cut(meta, ";")
		if mime == "" {
			mime = defaultMime
		}
		r.part()
		r.out = append(r.out, `{"inlineData":{"mimeType":`...)
		r.out = appendString(r.out, mime)
		r.out = append(r.out, `,"data":`...)
		if escaped {
			r.out = appendString(r.out, data)
		} else {
			r.out = append(r.out, '"')
			r.out = append(r.out, data...)
			r.out = append(r.out, '"')
		}
		r.out = append(r.out, "}}"...)
		return nil
	}
	if scheme, _, _ := strings.Cut(s, ":"); scheme != "https" && scheme != "http" && scheme != "gs" {
		return apierror.InvalidParam(partParam(i, j, field),
			"Invalid '%s': expected a base64 data: URL or an http(s) URL.", partParam(i, j, field))
	}
	r.part()
	r.out = append(r.out, `{"fileData":{"mimeType":`...)
	r.out = appendString(r.out, mimeFromName(s, defaultMime))
	r.out = append(r.out, `,"fileUri":`...)
	r.out = append(r.out, url.Raw...)
	r.out = append(r.out, "}}"...)
	return nil
}

// mimeFromName guesses a MIME type from a URL's or file name's extension.
// A fixed table rather than mime.TypeByExtension: that one reads the host's
// tables, and the translation must not depend on the machine it runs on.
func mimeFromName(name, def string) string {
	if i := strings.IndexAny(name, "?#"); i >= 0 {
		name = name[:i]
	}
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 || strings.IndexByte(name[dot:], '/') >= 0 {
		return def
	}
	switch strings.ToLower(name[dot+1:]) {
	case "png":
		return "image/png"
	case "jpg", "jpeg":
		return "image/jpeg"
	case "webp":
		return "image/webp"
	case "gif":
		return "image/gif"
	case "heic":
		return "image/heic"
	case "heif":
		return "image/heif"
	case "pdf":
		return "application/pdf"
	case "txt":
		return "text/plain"
	case "wav":
		return "audio/wav"
	case "mp3":
		return "audio/mp3"
	case "mp4":
		return "video/mp4"
	}
	return def
}

func (r *request) toolCalls(i int, calls gjson.Result) error {
	if !calls.IsArray() {
		return nil
	}
	j := 0
	var err error
	calls.ForEach(func(_, c gjson.Result) bool {
		err = r.toolCall(i, j, c)
		j++
		return err == nil
	})
	return err
}

func (r *request) toolCall(i, j int, c gjson.Result) error {
	param := func(rest string) string { return msgParam(i, ".tool_calls["+strconv.Itoa(j)+"]"+rest) }
	if t := c.Get("type"); t.Exists() && t.Str != "function" {
		return r.unsupportedValue(param(".type"), "Gemini models only call functions.")
	}
	id, name, args := c.Get("id"), c.Get("function.name"), c.Get("function.arguments")
	if name.Type != gjson.String || name.Str == "" {
		return apierror.MissingParam(param(".function.name"))
	}
	a := strings.TrimSpace(args.Str)
	if a == "" {
		a = "{}"
	} else if a[0] != '{' || !gjson.Valid(a) {
		return apierror.InvalidParam(param(".function.arguments"),
			"Invalid '%s': Gemini needs the arguments of earlier tool calls to be a JSON object.", param(".function.arguments"))
	}
	if id.Type == gjson.String {
		if r.callNames == nil {
			r.callNames = make(map[string]string)
		}
		r.callNames[id.Str] = name.Str
	}
	r.part()
	r.out = append(r.out, `{"functionCall":{"name":`...)
	r.out = append(r.out, name.Raw...)
	r.out = append(r.out, `,"args":`...)
	r.out = append(r.out, a...)
	r.out = append(r.out, "}}"...)
	return nil
}

// functionResponse appends a tool result. Gemini wants a JSON object as the
// response: the result goes under "content", parsed when the text is a JSON
// object or array (as tool results often are) so the model sees structure,
// and as a string otherwise.
func (r *request) functionResponse(i int, name string, content gjson.Result) error {
	var text string
	switch {
	case content.Type == gjson.String:
		text = content.Str
	case content.IsArray():
		var b strings.Builder
		content.ForEach(func(_, p gjson.Result) bool {
			if p.Get("type").Str == "text" {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Get("text").Str)
			}
			return true
		})
		text = b.String()
	case content.Type == gjson.Null || !content.Exists():
	default:
		return apierror.InvalidParam(msgParam(i, ".content"), "Invalid type for 'messages[%d].content': expected a string or an array.", i)
	}
	r.part()
	r.out = append(r.out, `{"functionResponse":{"name":`...)
	r.out = appendString(r.out, name)
	r.out = append(r.out, `,"response":{"content":`...)
	switch t := strings.TrimSpace(text); {
	case t != "" && (t[0] == '{' || t[0] == '[') && gjson.Valid(t):
		r.out = append(r.out, t...)
	case content.Type == gjson.String:
		r.out = append(r.out, content.Raw...) // already a JSON string
	default:
		r.out = appendString(r.out, text)
	}
	r.out = append(r.out, "}}}"...)
	return nil
}

// tools appends tools and toolConfig.
func (r *request) tools() error {
	start := len(r.out)
	r.out = append(r.out, `,"tools":[{"functionDeclarations":[`...)
	n := 0
	if r.f.tools.IsArray() {
		j := 0
		var err error
		r.f.tools.ForEach(func(_, t gjson.Result) bool {
			var ok bool
			ok, err = r.declaration(j, t, n > 0)
			if ok {
				n++
			}
			j++
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	if n == 0 {
		// No functions: no tools, and no tool_choice to honour.
		r.out = r.out[:start]
		return nil
	}
	r.out = append(r.out, "]}]"...)
	return r.toolConfig()
}

// declaration appends one function declaration, reporting whether it did.
func (r *request) declaration(j int, t gjson.Result, comma bool) (bool, error) {
	param := func(rest string) string { return "tools[" + strconv.Itoa(j) + "]" + rest }
	if typ := t.Get("type").Str; typ != "function" {
		return false, r.unsupportedValue(param(".type"), "Gemini models only call functions.")
	}
	fn := t.Get("function")
	name := fn.Get("name")
	if name.Type != gjson.String || name.Str == "" {
		return false, apierror.MissingParam(param(".function.name"))
	}
	if comma {
		r.out = append(r.out, ',')
	}
	r.out = append(r.out, `{"name":`...)
	r.out = append(r.out, name.Raw...)
	if d := fn.Get("description"); d.Type == gjson.String {
		r.out = append(r.out, `,"description":`...)
		r.out = append(r.out, d.Raw...)
	}
	if p := fn.Get("parameters"); p.IsObject() && hasProperties(p) {
		r.out = append(r.out, `,"parameters":`...)
		var err error
		c := schemaConverter{r: r, root: p}
		if r.out, err = c.schema(r.out, p, param(".function.parameters"), 0); err != nil {
			return false, err
		}
	}
	r.out = append(r.out, '}')
	return true, nil
}

// hasProperties reports whether a parameters schema declares any: Gemini
// rejects an OBJECT schema without properties, which is how OpenAI clients
// describe a function that takes no arguments.
func hasProperties(p gjson.Result) bool {
	props := p.Get("properties")
	return props.IsObject() && !isEmpty(props)
}

func (r *request) toolConfig() error {
	c := r.f.toolChoice
	var mode string
	var names []gjson.Result // raw JSON strings
	switch {
	case !c.Exists() || c.Type == gjson.Null:
		return nil
	case c.Type == gjson.String:
		switch c.Str {
		case "auto":
			mode = "AUTO"
		case "none":
			mode = "NONE"
		case "required":
			mode = "ANY"
		default:
			return apierror.InvalidParam("tool_choice", "Invalid value for 'tool_choice': %s.", c.Raw)
		}
	case c.IsObject():
		switch c.Get("type").Str {
		case "function":
			name := c.Get("function.name")
			if name.Type != gjson.String {
				return apierror.MissingParam("tool_choice.function.name")
			}
			mode, names = "ANY", []gjson.Result{name}
		case "allowed_tools":
			switch c.Get("allowed_tools.mode").Str {
			case "required":
				mode = "ANY"
				c.Get("allowed_tools.tools").ForEach(func(_, t gjson.Result) bool {
					if n := t.Get("function.name"); n.Type == gjson.String {
						names = append(names, n)
					}
					return true
				})
			default:
				// Gemini restricts the functions only in mode ANY.
				if err := r.unsupportedValue("tool_choice.allowed_tools.mode", "Gemini models can restrict the functions they call only when a call is required."); err != nil {
					return err
				}
				mode = "AUTO"
			}
		default:
			if err := r.unsupportedValue("tool_choice.type", "Gemini models only call functions."); err != nil {
				return err
			}
			return nil
		}
	default:
		return apierror.InvalidParam("tool_choice", "Invalid type for 'tool_choice': expected a string or an object.")
	}
	r.out = append(r.out, `,"toolConfig":{"functionCallingConfig":{"mode":"`...)
	r.out = append(r.out, mode...)
	r.out = append(r.out, '"')
	if len(names) > 0 {
		r.out = append(r.out, `,"allowedFunctionNames":[`...)
		for k, n := range names {
			if k > 0 {
				r.out = append(r.out, ',')
			}
			r.out = append(r.out, n.Raw...)
		}
		r.out = append(r.out, ']')
	}
	r.out = append(r.out, "}}"...)
	return nil
}

// generationConfig appends generationConfig when any of its members is set.
func (r *request) generationConfig() error {
	start := len(r.out)
	r.out = append(r.out, `,"generationConfig":{`...)
	body := len(r.out)
	member := func(key string) {
		if len(r.out) > body {
			r.out = append(r.out, ',')
		}
		r.out = append(r.out, '"')
		r.out = append(r.out, key...)
		r.out = append(r.out, `":`...)
	}
	for _, p := range [...]struct {
		name, key string
		v         gjson.Result
	}{
		{"temperature", "temperature", r.f.temperature},
		{"top_p", "topP", r.f.topP},
		{"n", "candidateCount", r.f.n},
		{"presence_penalty", "presencePenalty", r.f.presencePenalty},
		{"frequency_penalty", "frequencyPenalty", r.f.frequencyPenalty},
		{"seed", "seed", r.f.seed},
	} {
		switch p.v.Type {
		case gjson.Null:
			continue
		case gjson.Number:
			member(p.key)
			r.out = append(r.out, p.v.Raw...)
		default:
			return apierror.InvalidParam(p.name, "Invalid type for '%s': expected a number.", p.name)
		}
	}

	// OpenAI deprecated max_tokens for max_completion_tokens; when both
	// come, the tighter limit is the one the client can rely on.
	limit := int64(-1)
	for _, p := range [...]struct {
		name string
		v    gjson.Result
	}{{"max_tokens", r.f.maxTokens}, {"max_completion_tokens", r.f.maxCompletionTokens}} {
		switch p.v.Type {
		case gjson.Null:
			continue
		case gjson.Number:
			if n := p.v.Int(); limit < 0 || n < limit {
				limit = n
			}
		default:
			return apierror.InvalidParam(p.name, "Invalid type for '%s': expected an integer.", p.name)
		}
	}
	if limit >= 0 {
		member("maxOutputTokens")
		r.out = strconv.AppendInt(r.out, limit, 10)
	}

	if err := r.stop(member); err != nil {
		return err
	}
	if err := r.responseFormat(member); err != nil {
		return err
	}
	if e := r.f.reasoningEffort; e.Exists() && e.Type != gjson.Null {
		var budget string
		switch e.Str {
		case "none", "minimal":
			budget = "0"
		case "low":
			budget = "1024"
		case "medium":
			budget = "8192"
		case "high":
			budget = "24576"
		default:
			return apierror.InvalidParam("reasoning_effort", "Invalid value for 'reasoning_effort': %s.", e.Raw)
		}
		member("thinkingConfig")
		r.out = append(r.out, `{"thinkingBudget":`...)
		r.out = append(r.out, budget...)
		r.out = append(r.out, '}')
	}

	if len(r.out) == body {
		r.out = r.out[:start]
		return nil
	}
	r.out = append(r.out, '}')
	return nil
}

// stop appends stopSequences. Empty sequences are dropped: they would match
// everywhere, and Gemini rejects them.
func (r *request) stop(member func(string)) error {
	s := r.f.stop
	switch {
	case s.Type == gjson.Null:
		return nil
	case s.Type == gjson.String:
		if s.Str != "" {
			member("stopSequences")
			r.out = append(r.out, '[')
			r.out = append(r.out, s.Raw...)
			r.out = append(r.out, ']')
		}
		return nil
	case !s.IsArray():
		return apierror.InvalidParam("stop", "Invalid type for 'stop': expected a string or an array of strings.")
	}
	var seqs []string
	var err error
	s.ForEach(func(_, v gjson.Result) bool {
		if v.Type != gjson.String {
			err = apierror.InvalidParam("stop", "Invalid type for 'stop': expected a string or an array of strings.")
			return false
		}
		if v.Str != "" {
			seqs = append(seqs, v.Raw)
		}
		return true
	})
	if err != nil {
		return err
	}
	if len(seqs) > maxStopSequences {
		return apierror.InvalidParam("stop", "Invalid 'stop': Gemini models accept at most %d stop sequences.", maxStopSequences)
	}
	if len(seqs) == 0 {
		return nil
	}
	member("stopSequences")
	r.out = append(r.out, '[')
	for k, raw := range seqs {
		if k > 0 {
			r.out = append(r.out, ',')
		}
		r.out = append(r.out, raw...)
	}
	r.out = append(r.out, ']')
	return nil
}

func (r *request) responseFormat(member func(string)) error {
	f := r.f.responseFormat
	if !f.Exists() || f.Type == gjson.Null {
		return nil
	}
	switch t := f.Get("type").Str; t {
	case "text":
		return nil
	case "json_object":
		member("responseMimeType")
		r.out = append(r.out, `"application/json"`...)
		return nil
	case "json_schema":
		member("responseMimeType")
		r.out = append(r.out, `"application/json"`...)
		schema := f.Get("json_schema.schema")
		if !schema.IsObject() {
			return nil // no schema: plain JSON mode
		}
		member("responseSchema")
		c := schemaConverter{r: r, root: schema, order: true}
		var err error
		r.out, err = c.schema(r.out, schema, "response_format.json_schema.schema", 0)
		return err
	default:
		return apierror.InvalidParam("response_format.type", "Invalid value for 'response_format.type': %s.", f.Get("type").Raw)
	}
}
