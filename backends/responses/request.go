package responses

import (
	"fmt"
	"regexp"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/metadata"
	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/jsonquote"
)

// createRequest is a validated POST /v1/responses body. Large values (input
// text, images) stay as raw JSON slices of the request body: they are copied
// into the stored items and the chat body without being decoded.
type createRequest struct {
	model        string
	instructions string // "" when absent
	hasInstr     bool
	// input is this request's input items, normalized to the stored item
	// shape (see normalizeItem), each a JSON object.
	input [][]byte

	fnTools    []fnTool
	webSearch  *webSearchTool
	toolsEcho  []byte // the tools array as the Response echoes it
	toolChoice toolChoice
	choiceEcho []byte

	temperature, topP gjson.Result // numbers, or absent
	maxOutputTokens   int64        // 0: no limit
	maxToolCalls      int64        // 0: no limit on built-in tool calls
	parallelToolCalls gjson.Result // bool, or absent
	previousID        string
	conversation      string // the conversation's id, "" for none (conversation.go)
	store             bool
	stream            bool
	background        bool
	metadata          []byte // object
	user              string
	safetyIdentifier  string
	promptCacheKey    string
	text              []byte // echo, {"format":{...}}
	responseFormat    []byte // chat response_format, nil for plain text
	reasoning         []byte // echo
	reasoningEffort   string
	truncation        string
	includeWebSources bool

	// The code_interpreter tool (codeinterpreter.go), and whether include
	// asked for its calls' outputs.
	codeInterpreter    *codeInterpreterTool
	includeCodeOutputs bool

	// The file_search tool (filesearch.go), and whether include asked for
	// its calls' results.
	fileSearch         *fileSearchTool
	includeFileResults bool
}

// fnTool is a function tool: its name and its chat completions definition.
type fnTool struct {
	name string
	chat []byte
}

// webSearchTool is the request's web search tool.
type webSearchTool struct {
	count int // results per search, from search_context_size
}

// toolChoice is the request's tool_choice: mode auto, none, required,
// function (name set), web_search or code_interpreter.
type toolChoice struct {
	mode string
	name string
}

// Limits OpenAI applies to the same fields.
const (
	minMaxOutputTokens = 16
)

// functionName is what OpenAI accepts as a function name.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// builtinUnavailable lists tool types OpenAI offers that this gateway does
// not run. They are refused by name rather than ignored: a model told it has
// a tool it cannot use would answer worse than a clear error.
var builtinUnavailable = map[string]bool{
	"computer_use_preview": true, "computer": true,
	"computer_use": true, "image_generation": true, "mcp": true, "local_shell": true, "shell": true,
	"custom": true, "apply_patch": true, "tool_search": true,
}

func isWebSearchType(t string) bool {
	switch t {
	case "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11":
		return true
	}
	return false
}

// parseCreate validates body, which must not be modified afterwards (the
// request refers into it). ids mints item ids; searchOK says whether a
// searcher is configured.
func parseCreate(body []byte, ids func(prefix string) string, searchOK bool) (*createRequest, *apierror.Error) {
	if !gjson.ValidBytes(body) {
		return nil, apierror.InvalidJSON()
	}
	// Parsed in place: gjson.ParseBytes would copy the body, which can be
	// tens of megabytes of data URLs. The results alias body, which the
	// caller keeps unchanged while the request lives.
	root := gjson.Parse(unsafe.String(&body[0], len(body)))
	if !root.IsObject() {
		return nil, apierror.InvalidJSON()
	}
	// Parsers disagree on duplicate keys (gjson takes the first, others the
	// last): a duplicate model could be billed as one model and served as
	// another. Refused, as the chat route refuses them.
	if dup := duplicateKey(root); dup != "" {
		return nil, apierror.InvalidParam(dup, "Duplicate key '%s' in the request body.", dup)
	}
	req := &createRequest{store: true, truncation: "disabled"}
	// Each step checks one family of fields; the first error is the one
	// reported, in this order.
	for _, parse := range []func(gjson.Result) *apierror.Error{
		req.parseModel,
		req.parseSampling,
		req.parseLimits,
		req.parseFlags,
		req.parseIdentifiers,
		req.parseConversation,
		refuseUnsupported,
		req.parseOutputOptions,
		func(root gjson.Result) *apierror.Error { return req.parseTools(root.Get("tools"), searchOK) },
		func(root gjson.Result) *apierror.Error { return req.parseToolChoice(root.Get("tool_choice")) },
		func(root gjson.Result) *apierror.Error { return req.parseInput(root.Get("input"), ids) },
	} {
		if aerr := parse(root); aerr != nil {
			return nil, aerr
		}
	}
	return req, nil
}

// parseModel reads model and instructions.
func (req *createRequest) parseModel(root gjson.Result) *apierror.Error {
	model := root.Get("model")
	switch {
	case !model.Exists() || model.Type == gjson.Null:
		return apierror.MissingParam("model")
	case model.Type != gjson.String:
		return typeError("model", "a string", model)
	case model.Str == "":
		return apierror.InvalidParam("model", "Invalid 'model': empty string. Expected a model id.")
	}
	req.model = model.Str

	if v := root.Get("instructions"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.String {
			return typeError("instructions", "a string", v)
		}
		req.instructions, req.hasInstr = v.Str, true
	}
	return nil
}

// parseSampling reads temperature and top_p, kept as numbers.
func (req *createRequest) parseSampling(root gjson.Result) *apierror.Error {
	for _, p := range []struct {
		name string
		dst  *gjson.Result
		max  float64
	}{{"temperature", &req.temperature, 2}, {"top_p", &req.topP, 1}} {
		v := root.Get(p.name)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if v.Type != gjson.Number {
			return typeError(p.name, "a number", v)
		}
		if v.Num < 0 || v.Num > p.max {
			return apierror.InvalidParam(p.name, "Invalid '%s': number out of range. Expected a value between 0 and %g, but got %s instead.", p.name, p.max, v.Raw)
		}
		*p.dst = v
	}
	return nil
}

// parseLimits reads max_output_tokens and max_tool_calls.
func (req *createRequest) parseLimits(root gjson.Result) *apierror.Error {
	for _, p := range []struct {
		name string
		dst  *int64
		min  int64
	}{{"max_output_tokens", &req.maxOutputTokens, minMaxOutputTokens}, {"max_tool_calls", &req.maxToolCalls, 1}} {
		v := root.Get(p.name)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		n, aerr := integer(p.name, v)
		if aerr != nil {
			return aerr
		}
		if n < p.min {
			return apierror.InvalidParam(p.name, "Invalid '%s': integer below minimum value. Expected a value >= %d, but got %d instead.", p.name, p.min, n)
		}
		*p.dst = n
	}
	return nil
}

// parseFlags reads the booleans store, stream, background and
// parallel_tool_calls.
func (req *createRequest) parseFlags(root gjson.Result) *apierror.Error {
	for _, p := range []struct {
		name string
		dst  *bool
	}{{"store", &req.store}, {"stream", &req.stream}, {"background", &req.background}} {
		v := root.Get(p.name)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if !v.IsBool() {
			return typeError(p.name, "a boolean", v)
		}
		*p.dst = v.Bool()
	}
	if v := root.Get("parallel_tool_calls"); v.Exists() && v.Type != gjson.Null {
		if !v.IsBool() {
			return typeError("parallel_tool_calls", "a boolean", v)
		}
		req.parallelToolCalls = v
	}
	return nil
}

// parseIdentifiers reads the string fields naming other things:
// previous_response_id, user, safety_identifier and prompt_cache_key.
func (req *createRequest) parseIdentifiers(root gjson.Result) *apierror.Error {
	for _, p := range []struct {
		name string
		dst  *string
	}{{"previous_response_id", &req.previousID}, {"user", &req.user},
		{"safety_identifier", &req.safetyIdentifier}, {"prompt_cache_key", &req.promptCacheKey}} {
		v := root.Get(p.name)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if v.Type != gjson.String {
			return typeError(p.name, "a string", v)
		}
		*p.dst = v.Str
	}
	return nil
}

// refuseUnsupported refuses features this gateway does not implement rather
// than silently dropping them, so a client never believes it got them.
func refuseUnsupported(root gjson.Result) *apierror.Error {
	for _, name := range []string{"prompt"} {
		if v := root.Get(name); v.Exists() && v.Type != gjson.Null {
			return apierror.InvalidParam(name, "The '%s' parameter is not supported on this gateway.", name)
		}
	}
	return nil
}

// parseOutputOptions reads what shapes the response: metadata, text,
// reasoning, truncation and include.
func (req *createRequest) parseOutputOptions(root gjson.Result) *apierror.Error {
	if aerr := req.parseMetadata(root.Get("metadata")); aerr != nil {
		return aerr
	}
	if aerr := req.parseText(root.Get("text")); aerr != nil {
		return aerr
	}
	if aerr := req.parseReasoning(root.Get("reasoning")); aerr != nil {
		return aerr
	}
	if v := root.Get("truncation"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.String || (v.Str != "auto" && v.Str != "disabled") {
			return apierror.InvalidParam("truncation", "Invalid value for 'truncation': expected 'auto' or 'disabled'.")
		}
		req.truncation = v.Str
	}
	if v := root.Get("include"); v.Exists() && v.Type != gjson.Null {
		if !v.IsArray() {
			return typeError("include", "an array", v)
		}
		for _, s := range v.Array() {
			if s.Str == "web_search_call.action.sources" {
				req.includeWebSources = true
			}
			if s.Str == "code_interpreter_call.outputs" {
				req.includeCodeOutputs = true
			}
			if s.Str == "file_search_call.results" {
				req.includeFileResults = true
			}
		}
	}
	return nil
}

// parseInput reads input, a string or an array of items, normalizing each
// item to the stored shape; ids mints the ids items lack.
func (req *createRequest) parseInput(input gjson.Result, ids func(prefix string) string) *apierror.Error {
	switch {
	case !input.Exists() || input.Type == gjson.Null:
		return apierror.MissingParam("input")
	case input.Type == gjson.String:
		req.input = [][]byte{userTextItem(ids("msg_"), input.Raw)}
	case input.IsArray():
		items := input.Array()
		if len(items) == 0 {
			return apierror.InvalidParam("input", "Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.")
		}
		req.input = make([][]byte, 0, len(items))
		for i, it := range items {
			item, aerr := normalizeItem(fmt.Sprintf("input[%d]", i), it, ids)
			if aerr != nil {
				return aerr
			}
			req.input = append(req.input, item)
		}
	default:
		return typeError("input", "a string or an array", input)
	}
	return nil
}

// duplicateKey returns the first top-level key of obj that appears twice,
// or "".
func duplicateKey(obj gjson.Result) string {
	seen := make(map[string]bool, 16)
	dup := ""
	obj.ForEach(func(k, _ gjson.Result) bool {
		if seen[k.Str] {
			dup = k.Str
			if len(dup) > 64 { // echoed in the error: bounded
				dup = strings.ToValidUTF8(dup[:64], "")
			}
			return false
		}
		seen[k.Str] = true
		return true
	})
	return dup
}

func typeError(param, want string, v gjson.Result) *apierror.Error {
	return &apierror.Error{Status: 400, Code: "invalid_type", Param: param,
		Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonType(v))}
}

func jsonType(v gjson.Result) string {
	switch v.Type {
	case gjson.String:
		return "a string"
	case gjson.Number:
		return "a number"
	case gjson.True, gjson.False:
		return "a boolean"
	case gjson.Null:
		return "null"
	}
	if v.IsArray() {
		return "an array"
	}
	return "an object"
}

func integer(param string, v gjson.Result) (int64, *apierror.Error) {
	if v.Type != gjson.Number || v.Num != float64(int64(v.Num)) {
		return 0, typeError(param, "an integer", v)
	}
	return int64(v.Num), nil
}

func (req *createRequest) parseMetadata(v gjson.Result) *apierror.Error {
	kept, aerr := metadata.Parse(v)
	if aerr != nil {
		return aerr
	}
	req.metadata = []byte("{}") // a response always carries an object
	if kept != nil {
		req.metadata = kept
	}
	return nil
}

// parseText reads text.format: plain text, JSON mode or structured output,
// which chat completions calls response_format.
func (req *createRequest) parseText(v gjson.Result) *apierror.Error {
	req.text = []byte(`{"format":{"type":"text"}}`)
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	if !v.IsObject() {
		return typeError("text", "an object", v)
	}
	f := v.Get("format")
	if !f.Exists() || f.Type == gjson.Null {
		req.text = []byte(v.Raw)
		return nil
	}
	if !f.IsObject() {
		return typeError("text.format", "an object", f)
	}
	switch t := f.Get("type").Str; t {
	case "text":
	case "json_object":
		req.responseFormat = []byte(`{"type":"json_object"}`)
	case "json_schema":
		name, schema := f.Get("name"), f.Get("schema")
		if name.Type != gjson.String || name.Str == "" {
			return apierror.MissingParam("text.format.name")
		}
		if !schema.IsObject() {
			return apierror.MissingParam("text.format.schema")
		}
		js := []byte(`{"name":`)
		js = append(js, name.Raw...)
		js = append(js, `,"schema":`...)
		js = append(js, schema.Raw...)
		if d := f.Get("description"); d.Type == gjson.String {
			js = append(append(js, `,"description":`...), d.Raw...)
		}
		if s := f.Get("strict"); s.IsBool() {
			js = append(append(js, `,"strict":`...), s.Raw...)
		}
		js = append(js, '}')
		req.responseFormat = append(append([]byte(`{"type":"json_schema","json_schema":`), js...), '}')
	default:
		return apierror.InvalidParam("text.format.type", "Invalid value: '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", t)
	}
	req.text = []byte(v.Raw)
	return nil
}

func (req *createRequest) parseReasoning(v gjson.Result) *apierror.Error {
	req.reasoning = []byte(`{"effort":null,"summary":null}`)
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	if !v.IsObject() {
		return typeError("reasoning", "an object", v)
	}
	if e := v.Get("effort"); e.Exists() && e.Type != gjson.Null {
		if e.Type != gjson.String {
			return typeError("reasoning.effort", "a string", e)
		}
		req.reasoningEffort = e.Str
	}
	req.reasoning = []byte(v.Raw)
	return nil
}

func (req *createRequest) parseTools(v gjson.Result, searchOK bool) *apierror.Error {
	req.toolsEcho = []byte("[]")
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	if !v.IsArray() {
		return typeError("tools", "an array", v)
	}
	echo := []byte{'['}
	for i, t := range v.Array() {
		param := fmt.Sprintf("tools[%d]", i)
		if !t.IsObject() {
			return typeError(param, "an object", t)
		}
		typ := t.Get("type").Str
		switch {
		case typ == "function":
			ft, e, aerr := parseFunctionTool(param, t)
			if aerr != nil {
				return aerr
			}
			if ft.name == webSearchFunction && req.webSearch != nil {
				return apierror.InvalidParam(param+".name", "The function name '%s' is reserved for the web search tool.", webSearchFunction)
			}
			if ft.name == pythonFunction && req.codeInterpreter != nil {
				return apierror.InvalidParam(param+".name", "The function name '%s' is reserved for the code interpreter tool.", pythonFunction)
			}
			if ft.name == fileSearchFunction && req.fileSearch != nil {
				return apierror.InvalidParam(param+".name", "The function name '%s' is reserved for the file search tool.", fileSearchFunction)
			}
			for _, other := range req.fnTools {
				if other.name == ft.name {
					return apierror.InvalidParam(param+".name", "Duplicate function name '%s' in tools.", ft.name)
				}
			}
			req.fnTools = append(req.fnTools, ft)
			echo = appendComma(echo)
			echo = append(echo, e...)
		case isWebSearchType(typ):
			if !searchOK {
				return apierror.InvalidParam("tools", "Web search is not configured on this gateway.")
			}
			for _, f := range req.fnTools {
				if f.name == webSearchFunction {
					return apierror.InvalidParam("tools", "The function name '%s' is reserved for the web search tool.", webSearchFunction)
				}
			}
			count := 5
			switch t.Get("search_context_size").Str {
			case "low":
				count = 3
			case "high":
				count = 10
			}
			req.webSearch = &webSearchTool{count: count}
			echo = appendComma(echo)
			echo = append(echo, t.Raw...)
		case typ == "code_interpreter":
			// Whether this gateway can run code is checked after parsing
			// (Service.checkCodeInterpreter).
			if aerr := req.parseCodeInterpreter(param, t); aerr != nil {
				return aerr
			}
			echo = appendComma(echo)
			echo = append(echo, t.Raw...)
		case typ == "file_search":
			// Whether this gateway has the stores is checked after parsing
			// (Service.checkFileSearch).
			if aerr := req.parseFileSearch(param, t); aerr != nil {
				return aerr
			}
			echo = appendComma(echo)
			echo = append(echo, t.Raw...)
		case builtinUnavailable[typ]:
			return apierror.InvalidParam("tools", "The tool type '%s' is not available on this gateway.", typ)
		case typ == "":
			return apierror.MissingParam(param + ".type")
		default:
			return apierror.InvalidParam(param+".type", "Invalid value: '%s'. The tool type is not supported.", typ)
		}
	}
	req.toolsEcho = append(echo, ']')
	return nil
}

// parseFunctionTool reads a Responses function tool ({type, name,
// description, parameters, strict}: flat, unlike chat completions'
// {type, function: {...}}) and returns it with its echo.
func parseFunctionTool(param string, t gjson.Result) (fnTool, []byte, *apierror.Error) {
	name := t.Get("name")
	if !name.Exists() || name.Type == gjson.Null {
		return fnTool{}, nil, apierror.MissingParam(param + ".name")
	}
	if name.Type != gjson.String || !functionName.MatchString(name.Str) {
		return fnTool{}, nil, apierror.InvalidParam(param+".name", "Invalid '%s.name': expected a string of letters, digits, underscores and dashes, at most 64 characters.", param)
	}
	desc, params, strict := t.Get("description"), t.Get("parameters"), t.Get("strict")
	if desc.Exists() && desc.Type != gjson.Null && desc.Type != gjson.String {
		return fnTool{}, nil, typeError(param+".description", "a string", desc)
	}
	if params.Exists() && params.Type != gjson.Null && !params.IsObject() {
		return fnTool{}, nil, typeError(param+".parameters", "an object", params)
	}
	if strict.Exists() && strict.Type != gjson.Null && !strict.IsBool() {
		return fnTool{}, nil, typeError(param+".strict", "a boolean", strict)
	}

	fn := []byte(`{"name":`)
	fn = append(fn, name.Raw...)
	if desc.Type == gjson.String {
		fn = append(append(fn, `,"description":`...), desc.Raw...)
	}
	if params.IsObject() {
		fn = append(append(fn, `,"parameters":`...), params.Raw...)
	}
	if strict.IsBool() {
		fn = append(append(fn, `,"strict":`...), strict.Raw...)
	}
	fn = append(fn, '}')
	chat := append(append([]byte(`{"type":"function","function":`), fn...), '}')

	echo := []byte(`{"type":"function","name":`)
	echo = append(echo, name.Raw...)
	echo = append(echo, `,"description":`...)
	echo = append(echo, rawOrNull(desc)...)
	echo = append(echo, `,"parameters":`...)
	echo = append(echo, rawOrNull(params)...)
	echo = append(echo, `,"strict":`...)
	echo = append(echo, rawOrNull(strict)...)
	echo = append(echo, '}')
	return fnTool{name: name.Str, chat: chat}, echo, nil
}

func rawOrNull(v gjson.Result) string {
	if !v.Exists() {
		return "null"
	}
	return v.Raw
}

func appendComma(b []byte) []byte {
	if len(b) > 1 {
		b = append(b, ',')
	}
	return b
}

func (req *createRequest) parseToolChoice(v gjson.Result) *apierror.Error {
	req.toolChoice = toolChoice{mode: "auto"}
	req.choiceEcho = []byte(`"auto"`)
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	switch {
	case v.Type == gjson.String:
		switch v.Str {
		case "auto", "none", "required":
			req.toolChoice.mode = v.Str
		default:
			return apierror.InvalidParam("tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", v.Str)
		}
	case v.IsObject():
		typ := v.Get("type").Str
		switch {
		case typ == "function":
			name := v.Get("name").Str
			found := false
			for _, f := range req.fnTools {
				found = found || f.name == name
			}
			if !found {
				return apierror.InvalidParam("tool_choice", "Tool choice '%s' not found in 'tools' parameter.", name)
			}
			req.toolChoice = toolChoice{mode: "function", name: name}
		case isWebSearchType(typ):
			if req.webSearch == nil {
				return apierror.InvalidParam("tool_choice", "Tool choice '%s' not found in 'tools' parameter.", typ)
			}
			req.toolChoice = toolChoice{mode: "web_search"}
		case typ == "code_interpreter":
			if req.codeInterpreter == nil {
				return apierror.InvalidParam("tool_choice", "Tool choice '%s' not found in 'tools' parameter.", typ)
			}
			req.toolChoice = toolChoice{mode: "code_interpreter"}
		case typ == "file_search":
			if req.fileSearch == nil {
				return apierror.InvalidParam("tool_choice", "Tool choice '%s' not found in 'tools' parameter.", typ)
			}
			req.toolChoice = toolChoice{mode: "file_search"}
		default:
			return apierror.InvalidParam("tool_choice", "Tool choice type '%s' is not supported on this gateway.", typ)
		}
	default:
		return typeError("tool_choice", "a string or an object", v)
	}
	req.choiceEcho = []byte(v.Raw)
	return nil
}

// Item normalization. Every item is stored, listed and replayed in one
// shape, the one OpenAI returns from input_items: an id, a type and a status
// on every item; message content always an array of typed parts.

// userTextItem is the item a plain-string input stands for. text is a raw
// JSON string.
func userTextItem(id, text string) []byte {
	b := make([]byte, 0, len(text)+96)
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"message","role":"user","content":[{"type":"input_text","text":`...)
	b = append(b, text...)
	return append(b, `}],"status":"completed"}`...)
}

func normalizeItem(param string, it gjson.Result, ids func(string) string) ([]byte, *apierror.Error) {
	if !it.IsObject() {
		return nil, typeError(param, "an object", it)
	}
	id := it.Get("id")
	if id.Exists() && id.Type != gjson.String && id.Type != gjson.Null {
		return nil, typeError(param+".id", "a string", id)
	}
	typ := it.Get("type")
	if typ.Exists() && typ.Type != gjson.String {
		return nil, typeError(param+".type", "a string", typ)
	}
	switch t := typ.Str; {
	case t == "" || t == "message":
		return normalizeMessage(param, it, pickID(id, ids, "msg_"))
	case t == "function_call":
		b := []byte(`{"id":`)
		b = appendString(b, pickID(id, ids, "fc_"))
		b = append(b, `,"type":"function_call"`...)
		for _, f := range []string{"call_id", "name", "arguments"} {
			v := it.Get(f)
			if v.Type != gjson.String {
				if !v.Exists() {
					return nil, apierror.MissingParam(param + "." + f)
				}
				return nil, typeError(param+"."+f, "a string", v)
			}
			b = append(b, `,"`+f+`":`...)
			b = append(b, v.Raw...)
		}
		return append(b, `,"status":"completed"}`...), nil
	case t == "function_call_output":
		callID, out := it.Get("call_id"), it.Get("output")
		if callID.Type != gjson.String {
			if !callID.Exists() {
				return nil, apierror.MissingParam(param + ".call_id")
			}
			return nil, typeError(param+".call_id", "a string", callID)
		}
		if out.Type != gjson.String && !out.IsArray() {
			if !out.Exists() {
				return nil, apierror.MissingParam(param + ".output")
			}
			return nil, typeError(param+".output", "a string or an array", out)
		}
		b := []byte(`{"id":`)
		b = appendString(b, pickID(id, ids, "fco_"))
		b = append(b, `,"type":"function_call_output","call_id":`...)
		b = append(b, callID.Raw...)
		b = append(b, `,"output":`...)
		b = append(b, out.Raw...)
		return append(b, `,"status":"completed"}`...), nil
	case t == "reasoning" || t == "web_search_call" || t == "code_interpreter_call" || t == "file_search_call":
		// Output items of earlier turns a client sends back: kept as they
		// are for input_items, not replayed to the model (chat completions
		// has no place for them; the message after a search carries what
		// was found).
		if id.Type != gjson.String {
			return nil, apierror.MissingParam(param + ".id")
		}
		return []byte(it.Raw), nil
	case t == "item_reference":
		return nil, apierror.InvalidParam(param+".type", "Item references are not supported on this gateway; send the item itself or use previous_response_id.")
	default:
		return nil, apierror.InvalidParam(param+".type", "Invalid value: '%s'. The input item type is not supported on this gateway.", t)
	}
}

func pickID(id gjson.Result, ids func(string) string, prefix string) string {
	if id.Type == gjson.String && id.Str != "" {
		return id.Str
	}
	return ids(prefix)
}

// normalizeMessage renders a message item. User, system and developer
// content becomes input_* parts; assistant content becomes output_text (or
// refusal) parts, whichever part type the client used, since clients replay
// assistant turns both ways.
func normalizeMessage(param string, it gjson.Result, id string) ([]byte, *apierror.Error) {
	role := it.Get("role")
	if !role.Exists() {
		return nil, apierror.MissingParam(param + ".role")
	}
	assistant := false
	switch role.Str {
	case "user", "system", "developer":
	case "assistant":
		assistant = true
	default:
		return nil, apierror.InvalidParam(param+".role", "Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", role.Str)
	}
	b := make([]byte, 0, 128)
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"message","role":`...)
	b = append(b, role.Raw...)
	b = append(b, `,"content":[`...)

	content := it.Get("content")
	switch {
	case !content.Exists() || content.Type == gjson.Null:
		return nil, apierror.MissingParam(param + ".content")
	case content.Type == gjson.String:
		b = appendTextPart(b, assistant, content.Raw)
	case content.IsArray():
		for j, p := range content.Array() {
			pp := fmt.Sprintf("%s.content[%d]", param, j)
			if j > 0 {
				b = append(b, ',')
			}
			var aerr *apierror.Error
			if b, aerr = appendPart(b, pp, p, assistant); aerr != nil {
				return nil, aerr
			}
		}
	default:
		return nil, typeError(param+".content", "a string or an array", content)
	}
	return append(b, `],"status":"completed"}`...), nil
}

func appendTextPart(b []byte, assistant bool, rawText string) []byte {
	if assistant {
		b = append(b, `{"type":"output_text","text":`...)
		b = append(b, rawText...)
		return append(b, `,"annotations":[],"logprobs":[]}`...)
	}
	b = append(b, `{"type":"input_text","text":`...)
	b = append(b, rawText...)
	return append(b, '}')
}

func appendPart(b []byte, param string, p gjson.Result, assistant bool) ([]byte, *apierror.Error) {
	if !p.IsObject() {
		return nil, typeError(param, "an object", p)
	}
	switch t := p.Get("type").Str; t {
	case "input_text", "output_text", "text":
		text := p.Get("text")
		if text.Type != gjson.String {
			return nil, typeError(param+".text", "a string", text)
		}
		if assistant && t == "output_text" {
			// Keep the client's annotations: they are part of the turn.
			ann := p.Get("annotations")
			b = append(b, `{"type":"output_text","text":`...)
			b = append(b, text.Raw...)
			b = append(b, `,"annotations":`...)
			if ann.IsArray() {
				b = append(b, ann.Raw...)
			} else {
				b = append(b, `[]`...)
			}
			return append(b, `,"logprobs":[]}`...), nil
		}
		return appendTextPart(b, assistant, text.Raw), nil
	case "refusal":
		if !assistant {
			return nil, apierror.InvalidParam(param+".type", "Refusal content is only valid in assistant messages.")
		}
		r := p.Get("refusal")
		if r.Type != gjson.String {
			return nil, typeError(param+".refusal", "a string", r)
		}
		b = append(b, `{"type":"refusal","refusal":`...)
		b = append(b, r.Raw...)
		return append(b, '}'), nil
	case "input_image":
		if assistant {
			return nil, apierror.InvalidParam(param+".type", "Invalid value: 'input_image'. Assistant messages support only 'output_text' and 'refusal'.")
		}
		u := p.Get("image_url")
		if u.Type != gjson.String || u.Str == "" {
			if p.Get("file_id").Exists() {
				return nil, apierror.InvalidParam(param+".file_id", "Images by file_id are not supported on this gateway; send image_url (a URL or a data URL).")
			}
			return nil, apierror.MissingParam(param + ".image_url")
		}
		detail := p.Get("detail")
		b = append(b, `{"type":"input_image","image_url":`...)
		b = append(b, u.Raw...)
		b = append(b, `,"detail":`...)
		if detail.Type == gjson.String {
			b = append(b, detail.Raw...)
		} else {
			b = append(b, `"auto"`...)
		}
		return append(b, '}'), nil
	case "input_file":
		if assistant {
			return nil, apierror.InvalidParam(param+".type", "Invalid value: 'input_file'. Assistant messages support only 'output_text' and 'refusal'.")
		}
		data := p.Get("file_data")
		if data.Type != gjson.String || data.Str == "" {
			return nil, apierror.InvalidParam(param, "Files are supported only inline (file_data) on this gateway.")
		}
		b = append(b, `{"type":"input_file","file_data":`...)
		b = append(b, data.Raw...)
		if fn := p.Get("filename"); fn.Type == gjson.String {
			b = append(append(b, `,"filename":`...), fn.Raw...)
		}
		return append(b, '}'), nil
	case "":
		return nil, apierror.MissingParam(param + ".type")
	default:
		return nil, apierror.InvalidParam(param+".type", "Invalid value: '%s'. The content type is not supported on this gateway.", t)
	}
}

// appendString appends s as a JSON string literal (jsonquote.Append).
func appendString(dst []byte, s string) []byte { return jsonquote.Append(dst, s) }

// messageText joins the text parts of a normalized message's content.
func messageText(content gjson.Result) string {
	var sb strings.Builder
	content.ForEach(func(_, p gjson.Result) bool {
		switch p.Get("type").Str {
		case "input_text", "output_text":
			sb.WriteString(p.Get("text").Str)
		case "refusal":
			sb.WriteString(p.Get("refusal").Str)
		}
		return true
	})
	return sb.String()
}
