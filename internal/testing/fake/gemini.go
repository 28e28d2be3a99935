package fake

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// NewGemini returns a fake Google Gemini API upstream
// (generativelanguage.googleapis.com) serving, under /v1beta and /v1:
//
//   - POST /models/{model}:generateContent
//   - POST /models/{model}:streamGenerateContent: with ?alt=sse server-sent
//     events ("data: <GenerateContentResponse>\r\n\r\n"), each carrying the next
//     word of every candidate and the usage so far, the last ones the
//     finishReason; without alt=sse the same responses as one JSON array
//   - POST /models/{model}:embedContent and :batchEmbedContents
//
// The replies are those of NewOpenAI for the same conversation (see the
// package documentation): systemInstruction counts as a system message, each
// functionResponse part as a tool message whose text is its response's
// "content" (or the whole response as JSON), candidateCount is n,
// maxOutputTokens max_tokens, stopSequences stop, and toolConfig's
// functionCallingConfig tool_choice (NONE: text; ANY with
// allowedFunctionNames: the first allowed function). finishReason is STOP
// (also for function calls) or MAX_TOKENS. Embeddings are unit vectors
// derived from a hash of the text, 768 dimensions unless outputDimensionality
// (at most 3072) says otherwise.
//
// Requests are checked as strictly as Gemini checks them, so a translator
// tested against the fake sends what Gemini accepts: unknown fields
// (camelCase names only), roles other than user and model, empty parts,
// empty text, parts with no or several kinds of data, function response
// turns whose count does not match the function calls before them, schema
// keywords and types outside Gemini's Schema, OBJECT schemas without
// properties, and out-of-range generation settings are 400 INVALID_ARGUMENT.
//
// With opts.APIKey set, the key must come in the x-goog-api-key header or the
// key query parameter. As with Gemini, a missing key is 403
// PERMISSION_DENIED and a wrong one 400 INVALID_ARGUMENT with an ErrorInfo
// detail of reason API_KEY_INVALID. The x-fake-* fault headers work as for
// NewOpenAI; injected errors have Gemini's error shape
// {"error":{"code","message","status"}}, and a retry-after also comes as a
// RetryInfo detail, which is where Gemini puts it. HeaderCutAfter counts
// events (Gemini streams have no [DONE]).
//
// It panics if opts.Fault.Status is set outside 400-599.
func NewGemini(opts Options) http.Handler {
	if s := opts.Fault.Status; s != 0 && (s < 400 || s > 599) {
		panic(fmt.Sprintf("fake: Options.Fault.Status %d outside 400-599", s))
	}
	return &geminiHandler{opts: opts}
}

type geminiHandler struct {
	opts Options
}

// geminiError is Gemini's error object, google.rpc.Status in JSON.
type geminiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
	Details []any  `json:"details,omitempty"`
	// retryAfter, when positive, is also sent as a retry-after header.
	retryAfter int
}

func geminiInvalid(format string, args ...any) *geminiError {
	return &geminiError{Code: http.StatusBadRequest, Status: "INVALID_ARGUMENT", Message: fmt.Sprintf(format, args...)}
}

func (e *geminiError) write(w http.ResponseWriter) {
	b, err := json.MarshalIndent(struct {
		Error *geminiError `json:"error"`
	}{e}, "", "  ")
	if err != nil { // cannot happen: plain values
		panic(err)
	}
	w.Header().Set("content-type", "application/json; charset=UTF-8")
	if e.retryAfter > 0 {
		w.Header().Set("retry-after", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.Code)
	_, _ = w.Write(b)
}

// geminiStatusName is the google.rpc.Code name Google's APIs pair with an
// HTTP status.
func geminiStatusName(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// geminiFaultError is the error for an injected status.
func geminiFaultError(f fault) *geminiError {
	e := &geminiError{Code: f.status, Status: geminiStatusName(f.status),
		Message: "Injected fault: status " + strconv.Itoa(f.status) + ".", retryAfter: f.retryAfter}
	if f.retryAfter > 0 {
		e.Details = []any{map[string]string{
			"@type":      "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": strconv.Itoa(f.retryAfter) + "s",
		}}
	}
	return e
}

func (h *geminiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// As in openAI.ServeHTTP: the body first, so a client hanging up
	// cancels the waits below.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			geminiInvalid("Request payload size exceeds the limit: %d bytes.", maxBody).write(w)
		}
		return
	}
	f, ferr := parseFault(h.opts.Fault, r)
	if sleep(r.Context(), h.opts.ServiceTime+f.delay) != nil {
		return
	}
	if ferr != nil {
		geminiInvalid("%s", ferr.Message).write(w)
		return
	}

	model, method, ok := geminiRoute(r.URL.Path)
	if !ok {
		(&geminiError{Code: http.StatusNotFound, Status: "NOT_FOUND",
			Message: fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path)}).write(w)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("allow", http.MethodPost)
		(&geminiError{Code: http.StatusMethodNotAllowed, Status: "INVALID_ARGUMENT",
			Message: fmt.Sprintf("Method %s is not allowed for %s; use POST.", r.Method, r.URL.Path)}).write(w)
		return
	}
	if e := h.authorize(r); e != nil {
		e.write(w)
		return
	}
	if f.status != 0 {
		geminiFaultError(f).write(w)
		return
	}

	switch method {
	case "generateContent", "streamGenerateContent":
		req, e := parseGeminiRequest(body)
		if e != nil {
			e.write(w)
			return
		}
		rep := generate(req.chat(model), body, f.chunks)
		if method == "generateContent" {
			writeGeminiJSON(w, http.StatusOK, geminiFinal(model, rep))
			return
		}
		h.stream(w, r, model, rep, f, r.URL.Query().Get("alt") == "sse")
	case "embedContent", "batchEmbedContents":
		out, e := geminiEmbed(model, method, body)
		if e != nil {
			e.write(w)
			return
		}
		writeGeminiJSON(w, http.StatusOK, out)
	default:
		(&geminiError{Code: http.StatusNotFound, Status: "NOT_FOUND",
			Message: fmt.Sprintf("models/%s is not found for API version v1beta, or is not supported for %s.", model, method)}).write(w)
	}
}

// geminiRoute splits /v1beta/models/{model}:{method}.
func geminiRoute(path string) (model, method string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/v1beta/models/")
	if !ok {
		if rest, ok = strings.CutPrefix(path, "/v1/models/"); !ok {
			return "", "", false
		}
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || strings.IndexByte(rest[:i], '/') >= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// authorize checks the key as Gemini does, with Gemini's statuses and
// messages.
func (h *geminiHandler) authorize(r *http.Request) *geminiError {
	if h.opts.APIKey == "" {
		return nil
	}
	key := r.Header.Get("x-goog-api-key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	switch {
	case key == "":
		return &geminiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED",
			Message: "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."}
	case key != h.opts.APIKey:
		e := geminiInvalid("API key not valid. Please pass a valid API key.")
		e.Details = []any{map[string]any{
			"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
			"reason":   "API_KEY_INVALID",
			"domain":   "googleapis.com",
			"metadata": map[string]string{"service": "generativelanguage.googleapis.com"},
		}}
		return e
	}
	return nil
}

func writeGeminiJSON(w http.ResponseWriter, status int, v any) {
	// Gemini's REST answers are indented; clients must not care.
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // cannot happen: plain values
		panic(err)
	}
	w.Header().Set("content-type", "application/json; charset=UTF-8")
	w.Header().Set("content-length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Request wire types. Decoding rejects unknown fields, as Gemini does.

type geminiRequest struct {
	Contents          []geminiContent         `json:"contents"`
	SystemInstruction *geminiContent          `json:"systemInstruction"`
	Tools             []geminiTool            `json:"tools"`
	ToolConfig        *geminiToolConfig       `json:"toolConfig"`
	GenerationConfig  *geminiGenerationConfig `json:"generationConfig"`
	SafetySettings    []struct {
		Category  string `json:"category"`
		Threshold string `json:"threshold"`
	} `json:"safetySettings"`
	CachedContent string `json:"cachedContent"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts,omitempty"`
}

type geminiPart struct {
	Text             *string                 `json:"text,omitempty"`
	Thought          bool                    `json:"thought,omitempty"`
	ThoughtSignature string                  `json:"thoughtSignature,omitempty"`
	InlineData       *geminiBlob             `json:"inlineData,omitempty"`
	FileData         *geminiFileData         `json:"fileData,omitempty"`
	FunctionCall     *geminiFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *geminiFunctionResponse `json:"functionResponse,omitempty"`
}

type geminiBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type geminiFileData struct {
	MimeType string `json:"mimeType"`
	FileURI  string `json:"fileUri"`
}

type geminiFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type geminiFunctionResponse struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

type geminiTool struct {
	FunctionDeclarations []geminiFunctionDeclaration `json:"functionDeclarations"`
	GoogleSearch         json.RawMessage             `json:"googleSearch"`
	CodeExecution        json.RawMessage             `json:"codeExecution"`
}

type geminiFunctionDeclaration struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type geminiToolConfig struct {
	FunctionCallingConfig *struct {
		Mode                 string   `json:"mode"`
		AllowedFunctionNames []string `json:"allowedFunctionNames"`
	} `json:"functionCallingConfig"`
}

type geminiGenerationConfig struct {
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"topP"`
	TopK               *int            `json:"topK"`
	CandidateCount     *int            `json:"candidateCount"`
	MaxOutputTokens    *int            `json:"maxOutputTokens"`
	StopSequences      []string        `json:"stopSequences"`
	PresencePenalty    *float64        `json:"presencePenalty"`
	FrequencyPenalty   *float64        `json:"frequencyPenalty"`
	Seed               *int32          `json:"seed"`
	ResponseMimeType   string          `json:"responseMimeType"`
	ResponseSchema     json.RawMessage `json:"responseSchema"`
	ResponseModalities []string        `json:"responseModalities"`
	ResponseLogprobs   *bool           `json:"responseLogprobs"`
	Logprobs           *int            `json:"logprobs"`
	ThinkingConfig     *struct {
		ThinkingBudget  *int   `json:"thinkingBudget"`
		IncludeThoughts *bool  `json:"includeThoughts"`
		ThinkingLevel   string `json:"thinkingLevel"`
	} `json:"thinkingConfig"`
}

// geminiMaxCandidates is Gemini's limit on candidateCount.
const geminiMaxCandidates = 8

// geminiFunctionName is Gemini's rule for function names.
var geminiFunctionName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.:\-]{0,63}$`)

func decodeStrict(body []byte, v any) *geminiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return geminiInvalid("Invalid JSON payload received. %v", err)
	}
	if dec.More() {
		return geminiInvalid("Invalid JSON payload received. Unexpected data after the JSON object.")
	}
	return nil
}

// parseGeminiRequest decodes and checks a generateContent body, with the
// errors Gemini gives for the same mistakes.
func parseGeminiRequest(body []byte) (*geminiRequest, *geminiError) {
	var req geminiRequest
	if e := decodeStrict(body, &req); e != nil {
		return nil, e
	}
	if len(req.Contents) == 0 {
		return nil, geminiInvalid("* GenerateContentRequest.contents: contents is not specified")
	}
	if s := req.SystemInstruction; s != nil {
		for j, p := range s.Parts {
			if p.Text == nil {
				return nil, geminiInvalid("* GenerateContentRequest.system_instruction.parts[%d]: only text parts are supported in the system instruction", j)
			}
		}
	}
	for i, c := range req.Contents {
		if c.Role != "" && c.Role != "user" && c.Role != "model" {
			return nil, geminiInvalid("Please use a valid role: user, model.")
		}
		if len(c.Parts) == 0 {
			return nil, geminiInvalid("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.", i)
		}
		for j := range c.Parts {
			if e := checkGeminiPart(&c.Parts[j], i, j); e != nil {
				return nil, e
			}
		}
		if e := checkFunctionTurns(req.Contents, i); e != nil {
			return nil, e
		}
	}

	declared := map[string]bool{}
	for t, tool := range req.Tools {
		for d, fd := range tool.FunctionDeclarations {
			field := fmt.Sprintf("tools[%d].function_declarations[%d]", t, d)
			if !geminiFunctionName.MatchString(fd.Name) {
				return nil, geminiInvalid("* GenerateContentRequest.%s.name: Invalid function name. Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain underscores, dots, colons and dashes, with a maximum length of 64.", field)
			}
			declared[fd.Name] = true
			if len(fd.Parameters) > 0 {
				if e := checkGeminiSchema(fd.Parameters, field+".parameters"); e != nil {
					return nil, e
				}
			}
		}
	}
	if tc := req.ToolConfig; tc != nil && tc.FunctionCallingConfig != nil {
		fc := tc.FunctionCallingConfig
		switch fc.Mode {
		case "", "MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED":
		default:
			return nil, geminiInvalid("Invalid value at 'tool_config.function_calling_config.mode' (type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), %q", fc.Mode)
		}
		if len(fc.AllowedFunctionNames) > 0 && fc.Mode != "ANY" && fc.Mode != "VALIDATED" {
			return nil, geminiInvalid("* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: only allowed when mode is ANY.")
		}
		for _, n := range fc.AllowedFunctionNames {
			if !declared[n] {
				return nil, geminiInvalid("* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: %q is not a declared function.", n)
			}
		}
	}
	if g := req.GenerationConfig; g != nil {
		if e := checkGenerationConfig(g); e != nil {
			return nil, e
		}
	}
	return &req, nil
}

func checkGeminiPart(p *geminiPart, i, j int) *geminiError {
	field := fmt.Sprintf("contents[%d].parts[%d]", i, j)
	kinds := 0
	for _, set := range []bool{p.Text != nil, p.InlineData != nil, p.FileData != nil, p.FunctionCall != nil, p.FunctionResponse != nil} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return geminiInvalid("* GenerateContentRequest.%s.data: required oneof field 'data' must have one initialized field", field)
	}
	switch {
	case p.Text != nil && *p.Text == "":
		return geminiInvalid("Unable to submit request because it has an empty text parameter. Add a value to the parameter and try again.")
	case p.InlineData != nil:
		if p.InlineData.MimeType == "" {
			return geminiInvalid("* GenerateContentRequest.%s.inline_data.mime_type: mime_type is not specified", field)
		}
		if _, err := base64.StdEncoding.DecodeString(p.InlineData.Data); err != nil {
			if _, err := base64.URLEncoding.DecodeString(p.InlineData.Data); err != nil {
				return geminiInvalid("Invalid value at '%s.inline_data.data' (TYPE_BYTES), Base64 decoding failed", field)
			}
		}
	case p.FileData != nil:
		if p.FileData.FileURI == "" {
			return geminiInvalid("* GenerateContentRequest.%s.file_data.file_uri: file_uri is not specified", field)
		}
	case p.FunctionCall != nil:
		if p.FunctionCall.Name == "" {
			return geminiInvalid("* GenerateContentRequest.%s.function_call.name: Name cannot be empty.", field)
		}
		if len(p.FunctionCall.Args) > 0 && !isJSONObject(p.FunctionCall.Args) {
			return geminiInvalid("Invalid value at '%s.function_call.args' (type.googleapis.com/google.protobuf.Struct), expected an object", field)
		}
	case p.FunctionResponse != nil:
		if p.FunctionResponse.Name == "" {
			return geminiInvalid("* GenerateContentRequest.%s.function_response.name: Name cannot be empty.", field)
		}
		if !isJSONObject(p.FunctionResponse.Response) {
			return geminiInvalid("Invalid value at '%s.function_response.response' (type.googleapis.com/google.protobuf.Struct), expected an object", field)
		}
	}
	return nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// checkFunctionTurns applies Gemini's rules for function calling turns to
// contents[i]: a turn of function responses follows a turn of as many
// function calls.
func checkFunctionTurns(contents []geminiContent, i int) *geminiError {
	count := func(c geminiContent, call bool) int {
		n := 0
		for _, p := range c.Parts {
			if (call && p.FunctionCall != nil) || (!call && p.FunctionResponse != nil) {
				n++
			}
		}
		return n
	}
	responses := count(contents[i], false)
	if responses == 0 {
		return nil
	}
	if i == 0 || contents[i-1].Role != "model" || count(contents[i-1], true) == 0 {
		return geminiInvalid("Please ensure that function response turn comes immediately after a function call turn.")
	}
	if calls := count(contents[i-1], true); calls != responses {
		return geminiInvalid("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
	}
	return nil
}

func checkGenerationConfig(g *geminiGenerationConfig) *geminiError {
	if g.CandidateCount != nil && (*g.CandidateCount < 1 || *g.CandidateCount > geminiMaxCandidates) {
		return geminiInvalid("* GenerateContentRequest.generation_config.candidate_count: must be between 1 and %d.", geminiMaxCandidates)
	}
	if g.MaxOutputTokens != nil && *g.MaxOutputTokens < 1 {
		return geminiInvalid("* GenerateContentRequest.generation_config.max_output_tokens: must be positive.")
	}
	if len(g.StopSequences) > 5 {
		return geminiInvalid("* GenerateContentRequest.generation_config.stop_sequences: at most 5 stop sequences are allowed.")
	}
	if g.Temperature != nil && (*g.Temperature < 0 || *g.Temperature > 2) {
		return geminiInvalid("* GenerateContentRequest.generation_config.temperature: must be between 0 and 2.")
	}
	if g.TopP != nil && (*g.TopP < 0 || *g.TopP > 1) {
		return geminiInvalid("* GenerateContentRequest.generation_config.top_p: must be between 0 and 1.")
	}
	switch g.ResponseMimeType {
	case "", "text/plain", "application/json", "text/x.enum":
	default:
		return geminiInvalid("* GenerateContentRequest.generation_config.response_mime_type: allowed mimetypes are `text/plain`, `application/json`, and `text/x.enum`.")
	}
	if len(g.ResponseSchema) > 0 {
		if g.ResponseMimeType != "application/json" && g.ResponseMimeType != "text/x.enum" {
			return geminiInvalid("* GenerateContentRequest.generation_config.response_schema: response_mime_type must be set to application/json or text/x.enum when response_schema is set.")
		}
		if e := checkGeminiSchema(g.ResponseSchema, "generation_config.response_schema"); e != nil {
			return e
		}
	}
	return nil
}

// geminiSchemaKeys are the fields of Gemini's Schema.
var geminiSchemaKeys = map[string]bool{
	"type": true, "format": true, "title": true, "description": true, "nullable": true, "enum": true,
	"maxItems": true, "minItems": true, "properties": true, "required": true, "minProperties": true,
	"maxProperties": true, "minLength": true, "maxLength": true, "pattern": true, "example": true,
	"anyOf": true, "propertyOrdering": true, "default": true, "items": true, "minimum": true, "maximum": true,
}

// checkGeminiSchema checks a Schema as Gemini does: known fields only, a
// known type, and an OBJECT must declare properties.
func checkGeminiSchema(raw json.RawMessage, field string) *geminiError {
	var s map[string]json.RawMessage
	if json.Unmarshal(raw, &s) != nil {
		return geminiInvalid("Invalid value at '%s' (type.googleapis.com/google.ai.generativelanguage.v1beta.Schema), expected an object", field)
	}
	for k := range s {
		if !geminiSchemaKeys[k] {
			return geminiInvalid("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, field)
		}
	}
	var typ string
	if t, ok := s["type"]; ok {
		if json.Unmarshal(t, &typ) != nil {
			return geminiInvalid("Invalid value at '%s.type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), %s", field, t)
		}
		switch strings.ToUpper(typ) {
		case "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL":
		default:
			return geminiInvalid("Invalid value at '%s.type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), %q", field, typ)
		}
		typ = strings.ToUpper(typ)
	}
	if f, ok := s["format"]; ok {
		var format string
		_ = json.Unmarshal(f, &format)
		switch format {
		case "enum", "date-time", "float", "double", "int32", "int64":
		default:
			return geminiInvalid("* GenerateContentRequest.%s.format: only 'enum' and 'date-time' are supported for STRING type", field)
		}
	}
	var props map[string]json.RawMessage
	if p, ok := s["properties"]; ok {
		if json.Unmarshal(p, &props) != nil {
			return geminiInvalid("Invalid value at '%s.properties', expected an object", field)
		}
	}
	if typ == "OBJECT" && len(props) == 0 {
		return geminiInvalid("* GenerateContentRequest.%s.properties: should be non-empty for OBJECT type", field)
	}
	for name, sub := range props {
		if e := checkGeminiSchema(sub, field+".properties["+name+"].value"); e != nil {
			return e
		}
	}
	if items, ok := s["items"]; ok {
		if e := checkGeminiSchema(items, field+".items"); e != nil {
			return e
		}
	}
	if alts, ok := s["anyOf"]; ok {
		var subs []json.RawMessage
		if json.Unmarshal(alts, &subs) != nil {
			return geminiInvalid("Invalid value at '%s.any_of', expected a list", field)
		}
		for k, sub := range subs {
			if e := checkGeminiSchema(sub, fmt.Sprintf("%s.any_of[%d]", field, k)); e != nil {
				return e
			}
		}
	}
	if e, ok := s["enum"]; ok {
		var vals []string
		if json.Unmarshal(e, &vals) != nil {
			return geminiInvalid("Invalid value at '%s.enum', expected a list of strings", field)
		}
	}
	return nil
}

// chat restates the request as the OpenAI fake's chatRequest, so that both
// fakes derive the same reply from the same conversation.
func (req *geminiRequest) chat(model string) *chatRequest {
	c := &chatRequest{Model: model, n: 1, maxWords: -1}
	text := func(role string, s string) chatMessage {
		b, _ := json.Marshal(s)
		return chatMessage{Role: role, Content: b}
	}
	if s := req.SystemInstruction; s != nil {
		c.Messages = append(c.Messages, text("system", s.joinText()))
	}
	for _, content := range req.Contents {
		role := "user"
		if content.Role == "model" {
			role = "assistant"
		}
		responses := 0
		for _, p := range content.Parts {
			if p.FunctionResponse != nil {
				c.Messages = append(c.Messages, text("tool", p.FunctionResponse.text()))
				responses++
			}
		}
		if responses == 0 || content.joinText() != "" {
			c.Messages = append(c.Messages, text(role, content.joinText()))
		}
	}
	if g := req.GenerationConfig; g != nil {
		if g.CandidateCount != nil {
			c.n = *g.CandidateCount
		}
		if g.MaxOutputTokens != nil {
			c.maxWords = *g.MaxOutputTokens
		}
		for _, s := range g.StopSequences {
			if s != "" {
				c.stops = append(c.stops, s)
			}
		}
		if g.ResponseMimeType == "application/json" {
			c.jsonOut, c.schema = true, g.ResponseSchema
		}
	}
	c.tool = req.chooseFunction()
	return c
}

// joinText joins the text parts as the OpenAI fake joins text content parts.
func (c *geminiContent) joinText() string {
	var texts []string
	for _, p := range c.Parts {
		if p.Text != nil && !p.Thought {
			texts = append(texts, *p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// text is what a tool message would have said: the response's "content"
// when it is a string, else the response as JSON.
func (r *geminiFunctionResponse) text() string {
	var v struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(r.Response, &v) == nil && len(v.Content) > 0 {
		var s string
		if json.Unmarshal(v.Content, &s) == nil {
			return s
		}
		return string(v.Content)
	}
	return string(r.Response)
}

// chooseFunction picks the function to call, as chooseTool does for OpenAI:
// none in mode NONE or after function responses, else the first declared
// (or first allowed) function.
func (req *geminiRequest) chooseFunction() *chatFunction {
	last := req.Contents[len(req.Contents)-1]
	for _, p := range last.Parts {
		if p.FunctionResponse != nil {
			return nil
		}
	}
	var allowed []string
	if tc := req.ToolConfig; tc != nil && tc.FunctionCallingConfig != nil {
		if tc.FunctionCallingConfig.Mode == "NONE" {
			return nil
		}
		allowed = tc.FunctionCallingConfig.AllowedFunctionNames
	}
	for _, tool := range req.Tools {
		for _, fd := range tool.FunctionDeclarations {
			if len(allowed) > 0 && !containsString(allowed, fd.Name) {
				continue
			}
			return geminiChatFunction(fd)
		}
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// geminiChatFunction converts a declaration for sampleArguments (which
// reads Gemini's upper-case type names too).
func geminiChatFunction(fd geminiFunctionDeclaration) *chatFunction {
	return &chatFunction{Name: fd.Name, Parameters: fd.Parameters}
}

// Response wire types.

type geminiOutResponse struct {
	Candidates    []geminiOutCandidate `json:"candidates"`
	UsageMetadata *geminiUsageMetadata `json:"usageMetadata,omitempty"`
	ModelVersion  string               `json:"modelVersion"`
	ResponseID    string               `json:"responseId"`
}

type geminiOutCandidate struct {
	Content      geminiOutContent `json:"content"`
	FinishReason string           `json:"finishReason,omitempty"`
	// Index is left out when 0, as Gemini's proto3 JSON does.
	Index int `json:"index,omitempty"`
}

type geminiOutContent struct {
	Parts []geminiOutPart `json:"parts,omitempty"`
	Role  string          `json:"role"`
}

type geminiOutPart struct {
	Text         *string `json:"text,omitempty"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
}

type geminiUsageMetadata struct {
	PromptTokenCount     int                   `json:"promptTokenCount"`
	CandidatesTokenCount int                   `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int                   `json:"totalTokenCount"`
	PromptTokensDetails  []geminiModalityCount `json:"promptTokensDetails"`
}

type geminiModalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

func geminiUsage(prompt, candidates int) *geminiUsageMetadata {
	return &geminiUsageMetadata{
		PromptTokenCount:     prompt,
		CandidatesTokenCount: candidates,
		TotalTokenCount:      prompt + candidates,
		PromptTokensDetails:  []geminiModalityCount{{Modality: "TEXT", TokenCount: prompt}},
	}
}

func geminiFinishReason(finish string) string {
	if finish == "length" {
		return "MAX_TOKENS"
	}
	return "STOP" // also for function calls: Gemini has no reason of its own for them
}

// geminiResponseID derives Gemini's responseId from the reply's id.
func geminiResponseID(rep *reply) string { return strings.TrimPrefix(rep.id, "chatcmpl-") }

func geminiCall(c *toolCall) geminiOutPart {
	var p geminiOutPart
	p.FunctionCall = &struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}{Name: c.name, Args: json.RawMessage(c.arguments)}
	return p
}

// geminiFinal is the whole reply as one GenerateContentResponse.
func geminiFinal(model string, rep *reply) *geminiOutResponse {
	out := &geminiOutResponse{
		UsageMetadata: geminiUsage(rep.promptTokens, rep.completionTokens),
		ModelVersion:  model,
		ResponseID:    geminiResponseID(rep),
	}
	for i := range rep.choices {
		c := &rep.choices[i]
		cand := geminiOutCandidate{Index: i, FinishReason: geminiFinishReason(c.finish), Content: geminiOutContent{Role: "model"}}
		if c.call != nil {
			cand.Content.Parts = []geminiOutPart{geminiCall(c.call)}
		} else if s := c.content(); s != "" {
			cand.Content.Parts = []geminiOutPart{{Text: &s}}
		}
		out.Candidates = append(out.Candidates, cand)
	}
	return out
}

// geminiEvents is the reply as stream events: each carries the next word of
// every candidate that has one (a function call comes whole, in the first),
// a candidate's last one its finishReason, and every one the usage so far.
func geminiEvents(model string, rep *reply) []*geminiOutResponse {
	steps := 1
	for i := range rep.choices {
		if c := &rep.choices[i]; c.call == nil {
			steps = max(steps, len(c.pieces))
		}
	}
	events := make([]*geminiOutResponse, 0, steps)
	generated := 0
	for step := 0; step < steps; step++ {
		ev := &geminiOutResponse{ModelVersion: model, ResponseID: geminiResponseID(rep)}
		for i := range rep.choices {
			c := &rep.choices[i]
			cand := geminiOutCandidate{Index: i, Content: geminiOutContent{Role: "model"}}
			switch {
			case c.call != nil:
				if step > 0 {
					continue
				}
				cand.Content.Parts = []geminiOutPart{geminiCall(c.call)}
				generated += c.tokens()
				cand.FinishReason = geminiFinishReason(c.finish)
			case step < len(c.pieces):
				cand.Content.Parts = []geminiOutPart{{Text: &c.pieces[step]}}
				generated++
				if step == len(c.pieces)-1 {
					cand.FinishReason = geminiFinishReason(c.finish)
				}
			case step == 0: // no text at all
				cand.FinishReason = geminiFinishReason(c.finish)
			default:
				continue
			}
			ev.Candidates = append(ev.Candidates, cand)
		}
		ev.UsageMetadata = geminiUsage(rep.promptTokens, generated)
		events = append(events, ev)
	}
	return events
}

// stream writes the events as SSE, or as Gemini's JSON array without
// alt=sse, flushing each. f's cut and stall faults interrupt it after their
// number of events.
func (h *geminiHandler) stream(w http.ResponseWriter, r *http.Request, model string, rep *reply, f fault, asSSE bool) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	if asSSE {
		w.Header().Set("content-type", "text/event-stream")
	} else {
		w.Header().Set("content-type", "application/json; charset=UTF-8")
	}
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	events := geminiEvents(model, rep)
	for i, ev := range events {
		if f.interrupt(ctx, i) {
			return
		}
		if i > 0 && sleep(ctx, h.opts.ChunkDelay) != nil {
			return
		}
		b, err := json.Marshal(ev)
		if err != nil { // cannot happen: plain values
			panic(err)
		}
		var buf []byte
		switch {
		case asSSE:
			buf = append(append(append(buf, "data: "...), b...), "\r\n\r\n"...)
		case i == 0:
			buf = append(append(buf, '['), b...)
		default:
			buf = append(append(buf, ",\r\n"...), b...)
		}
		if !asSSE && i == len(events)-1 {
			buf = append(buf, ']')
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// Embeddings.

// geminiEmbedDims is the default vector size, text-embedding-004's;
// geminiMaxEmbedDims the largest outputDimensionality accepted.
const (
	geminiEmbedDims    = 768
	geminiMaxEmbedDims = 3072
	geminiMaxBatch     = 100
)

type geminiEmbedRequest struct {
	Model                string        `json:"model"`
	Content              geminiContent `json:"content"`
	TaskType             string        `json:"taskType"`
	Title                string        `json:"title"`
	OutputDimensionality *int          `json:"outputDimensionality"`
}

type geminiEmbedding struct {
	Values []float32 `json:"values"`
}

func geminiEmbed(model, method string, body []byte) (any, *geminiError) {
	var reqs []geminiEmbedRequest
	if method == "embedContent" {
		var req geminiEmbedRequest
		if e := decodeStrict(body, &req); e != nil {
			return nil, e
		}
		reqs = []geminiEmbedRequest{req}
	} else {
		var batch struct {
			Requests []geminiEmbedRequest `json:"requests"`
		}
		if e := decodeStrict(body, &batch); e != nil {
			return nil, e
		}
		if len(batch.Requests) == 0 {
			return nil, geminiInvalid("* BatchEmbedContentsRequest.requests: at least one request is required.")
		}
		if len(batch.Requests) > geminiMaxBatch {
			return nil, geminiInvalid("* BatchEmbedContentsRequest.requests: at most %d requests can be in one batch.", geminiMaxBatch)
		}
		reqs = batch.Requests
	}
	out := make([]geminiEmbedding, len(reqs))
	for i, req := range reqs {
		// In a batch every request names the model, which must be the
		// one in the URL.
		if (method == "batchEmbedContents" || req.Model != "") && req.Model != "models/"+model {
			return nil, geminiInvalid("* BatchEmbedContentsRequest.requests[%d].model: model %q does not match the model in the URL, models/%s.", i, req.Model, model)
		}
		if len(req.Content.Parts) == 0 {
			return nil, geminiInvalid("* EmbedContentRequest.content.parts: contents.parts must not be empty.")
		}
		var texts []string
		for _, p := range req.Content.Parts {
			if p.Text == nil {
				return nil, geminiInvalid("* EmbedContentRequest.content.parts: only text parts are supported.")
			}
			texts = append(texts, *p.Text)
		}
		dims := geminiEmbedDims
		if d := req.OutputDimensionality; d != nil {
			if *d < 1 || *d > geminiMaxEmbedDims {
				return nil, geminiInvalid("* EmbedContentRequest.output_dimensionality: must be between 1 and %d.", geminiMaxEmbedDims)
			}
			dims = *d
		}
		out[i] = geminiEmbedding{Values: geminiVector(strings.Join(texts, "\n"), dims)}
	}
	if method == "embedContent" {
		return map[string]geminiEmbedding{"embedding": out[0]}, nil
	}
	return map[string][]geminiEmbedding{"embeddings": out}, nil
}

// geminiVector is the fake's embedding of text: dims values from SHA-256 of
// the text in counter mode, scaled to [-1, 1) and normalized to unit length.
func geminiVector(text string, dims int) []float32 {
	v := make([]float64, dims)
	var block [sha256.Size]byte
	var ctr [4]byte
	norm := 0.0
	for i := range v {
		if i%8 == 0 {
			binary.BigEndian.PutUint32(ctr[:], uint32(i/8))
			h := sha256.New()
			h.Write([]byte(text))
			h.Write(ctr[:])
			h.Sum(block[:0])
		}
		u := binary.BigEndian.Uint32(block[(i%8)*4:])
		v[i] = float64(u)/(1<<31) - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i := range v {
		out[i] = float32(v[i] / norm)
	}
	return out
}
