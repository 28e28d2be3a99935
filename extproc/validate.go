package extproc

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/apierror"
)

// Top-level members of a chat completion request that the gateway reads.
// Others pass through to the provider untouched.
const (
	fModel = iota
	fMessages
	fTemperature
	fTopP
	fPresencePenalty
	fFrequencyPenalty
	fStop
	fN
	fMaxTokens
	fMaxCompletionTokens
	fStream
	fStreamOptions
	fTools
	fToolChoice
	numFields
)

var fieldNames = [numFields]string{
	"model", "messages", "temperature", "top_p", "presence_penalty", "frequency_penalty", "stop", "n",
	"max_tokens", "max_completion_tokens", "stream", "stream_options", "tools", "tool_choice",
}

func fieldIndex(key string) int {
	switch key {
	case "model":
		return fModel
	case "messages":
		return fMessages
	case "temperature":
		return fTemperature
	case "top_p":
		return fTopP
	case "presence_penalty":
		return fPresencePenalty
	case "frequency_penalty":
		return fFrequencyPenalty
	case "stop":
		return fStop
	case "n":
		return fN
	case "max_tokens":
		return fMaxTokens
	case "max_completion_tokens":
		return fMaxCompletionTokens
	case "stream":
		return fStream
	case "stream_options":
		return fStreamOptions
	case "tools":
		return fTools
	case "tool_choice":
		return fToolChoice
	}
	return -1
}

// span is where a value lies in the body; the zero span means absent.
type span struct{ start, end int }

func (s span) present() bool { return s.end > 0 }

// chatRequest is what validation learns about a chat completion body: where
// the members it may rewrite lie, and the few values routing needs.
type chatRequest struct {
	fields [numFields]span
	// end is the offset just past the last member's value, where a new
	// member can be inserted.
	end          int
	model        string
	stream       bool
	includeUsage bool // stream_options.include_usage is true
}

// parseChat validates a chat completion request body as OpenAI does and
// returns what routing needs. The body is read in place and not modified.
func parseChat(body []byte) (chatRequest, *apierror.Error) {
	var r chatRequest
	if !gjson.ValidBytes(body) {
		return r, apierror.InvalidJSON()
	}
	s := bytesString(body)
	start := skipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return r, &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type",
			Message: "The request body must be a JSON object."}
	}
	it := newIter(s, start)
	for it.next() {
		r.end = it.end
		f := fieldIndex(it.key)
		if f < 0 {
			continue
		}
		// Parsers disagree on duplicate keys (gjson takes the first, most
		// providers the last), so a duplicate could make the gateway route
		// and bill one model while the provider serves another. Refuse them.
		if r.fields[f].present() {
			return r, apierror.InvalidParam(fieldNames[f], "Duplicate key '%s' in the request body.", fieldNames[f])
		}
		r.fields[f] = span{it.val, it.end}
	}
	raw := func(f int) string { return s[r.fields[f].start:r.fields[f].end] }

	model := raw(fModel)
	if isNull(model) {
		return r, apierror.MissingParam("model")
	}
	if model[0] != '"' {
		return r, errType("model", "a string", model)
	}
	if r.model = str(model); r.model == "" {
		return r, apierror.MissingParam("model")
	}
	if e := validateMessages(raw(fMessages)); e != nil {
		return r, e
	}
	for _, c := range [...]struct {
		f      int
		lo, hi float64
	}{
		{fTemperature, 0, 2},
		{fTopP, 0, 1},
		{fPresencePenalty, -2, 2},
		{fFrequencyPenalty, -2, 2},
	} {
		if e := checkNumber(fieldNames[c.f], raw(c.f), c.lo, c.hi, false); e != nil {
			return r, e
		}
	}
	for _, c := range [...]struct {
		f      int
		lo, hi float64
	}{
		{fN, 1, 128},
		{fMaxTokens, 1, math.Inf(1)},
		{fMaxCompletionTokens, 1, math.Inf(1)},
	} {
		if e := checkNumber(fieldNames[c.f], raw(c.f), c.lo, c.hi, true); e != nil {
			return r, e
		}
	}
	if e := validateStop(raw(fStop)); e != nil {
		return r, e
	}
	if v := raw(fStream); !isNull(v) {
		if v != "true" && v != "false" {
			return r, errType("stream", "a boolean", v)
		}
		r.stream = v == "true"
	}
	if e := r.validateStreamOptions(raw(fStreamOptions)); e != nil {
		return r, e
	}
	if e := validateTools(raw(fTools)); e != nil {
		return r, e
	}
	if e := validateToolChoice(raw(fToolChoice)); e != nil {
		return r, e
	}
	return r, nil
}

func (r *chatRequest) validateStreamOptions(v string) *apierror.Error {
	if isNull(v) {
		return nil
	}
	if v[0] != '{' {
		return errType("stream_options", "an object", v)
	}
	if !r.stream {
		return apierror.InvalidParam("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	seen := false
	for it := newIter(v, 0); it.next(); {
		if it.key != "include_usage" {
			continue
		}
		// A duplicate could have us see true while the provider sees
		// false, and the usage the gateway meters would never arrive.
		if seen {
			return apierror.InvalidParam("stream_options.include_usage", "Duplicate key 'include_usage' in 'stream_options'.")
		}
		seen = true
		switch iu := it.raw(); iu {
		case "true":
			r.includeUsage = true
		case "false", "null":
		default:
			return errType("stream_options.include_usage", "a boolean", iu)
		}
	}
	return nil
}

func validRole(role string) bool {
	switch role {
	case "system", "developer", "user", "assistant", "tool":
		return true
	}
	return false
}

func validateMessages(v string) *apierror.Error {
	if isNull(v) {
		return apierror.MissingParam("messages")
	}
	if v[0] != '[' {
		return errType("messages", "an array", v)
	}
	it := newIter(v, 0)
	for it.next() {
		if e := validateMessage(it.idx, it.raw()); e != nil {
			return e
		}
	}
	if it.idx < 0 {
		return &apierror.Error{Status: http.StatusBadRequest, Code: "empty_array", Param: "messages",
			Message: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."}
	}
	return nil
}

func msgParam(i int, field string) string {
	if field == "" {
		return fmt.Sprintf("messages[%d]", i)
	}
	return fmt.Sprintf("messages[%d].%s", i, field)
}

func validateMessage(i int, v string) *apierror.Error {
	if v[0] != '{' {
		return errType(msgParam(i, ""), "an object", v)
	}
	var role, content, toolCalls, functionCall, toolCallID string
	for it := newIter(v, 0); it.next(); {
		switch it.key {
		case "role":
			role = it.raw()
		case "content":
			content = it.raw()
		case "tool_calls":
			toolCalls = it.raw()
		case "function_call":
			functionCall = it.raw()
		case "tool_call_id":
			toolCallID = it.raw()
		}
	}
	if isNull(role) {
		return apierror.MissingParam(msgParam(i, "role"))
	}
	if role[0] != '"' {
		return errType(msgParam(i, "role"), "a string", role)
	}
	r := str(role)
	if !validRole(r) {
		return apierror.InvalidParam(msgParam(i, "role"),
			"Invalid value: '%s'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'.", clip(r))
	}
	if !isNull(toolCalls) && toolCalls[0] != '[' {
		return errType(msgParam(i, "tool_calls"), "an array", toolCalls)
	}
	switch {
	case isNull(content):
		// An assistant turn that only calls tools has no content.
		if r != "assistant" || (isNull(toolCalls) && isNull(functionCall)) {
			return apierror.MissingParam(msgParam(i, "content"))
		}
	case content[0] != '"' && content[0] != '[':
		return errType(msgParam(i, "content"), "a string or an array", content)
	}
	if r == "tool" {
		if isNull(toolCallID) {
			return apierror.MissingParam(msgParam(i, "tool_call_id"))
		}
		if toolCallID[0] != '"' {
			return errType(msgParam(i, "tool_call_id"), "a string", toolCallID)
		}
	}
	return nil
}

func validateStop(v string) *apierror.Error {
	switch {
	case isNull(v) || v[0] == '"':
		return nil
	case v[0] != '[':
		return errType("stop", "a string or an array of strings", v)
	}
	it := newIter(v, 0)
	for it.next() {
		if it.s[it.val] != '"' {
			return errType(fmt.Sprintf("stop[%d]", it.idx), "a string", it.raw())
		}
	}
	if n := it.idx + 1; n > 4 {
		return &apierror.Error{Status: http.StatusBadRequest, Code: "array_above_max_length", Param: "stop",
			Message: fmt.Sprintf("Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length %d instead.", n)}
	}
	return nil
}

func validateTools(v string) *apierror.Error {
	if isNull(v) {
		return nil
	}
	if v[0] != '[' {
		return errType("tools", "an array", v)
	}
	for it := newIter(v, 0); it.next(); {
		if e := validateTool(it.idx, it.raw()); e != nil {
			return e
		}
	}
	return nil
}

func validateTool(i int, v string) *apierror.Error {
	param := func(field string) string {
		if field == "" {
			return fmt.Sprintf("tools[%d]", i)
		}
		return fmt.Sprintf("tools[%d].%s", i, field)
	}
	if v[0] != '{' {
		return errType(param(""), "an object", v)
	}
	var typ, fn string
	for it := newIter(v, 0); it.next(); {
		switch it.key {
		case "type":
			typ = it.raw()
		case "function":
			fn = it.raw()
		}
	}
	switch {
	case isNull(typ):
		return apierror.MissingParam(param("type"))
	case typ[0] != '"':
		return errType(param("type"), "a string", typ)
	case str(typ) != "function":
		return apierror.InvalidParam(param("type"), "Invalid value: '%s'. Supported values are: 'function'.", clip(str(typ)))
	case isNull(fn):
		return apierror.MissingParam(param("function"))
	case fn[0] != '{':
		return errType(param("function"), "an object", fn)
	}
	var name string
	for it := newIter(fn, 0); it.next(); {
		if it.key == "name" {
			name = it.raw()
		}
	}
	switch {
	case isNull(name):
		return apierror.MissingParam(param("function.name"))
	case name[0] != '"':
		return errType(param("function.name"), "a string", name)
	case str(name) == "":
		return apierror.InvalidParam(param("function.name"), "Invalid 'tools[%d].function.name': empty string. Expected a string with minimum length 1.", i)
	}
	return nil
}

func validateToolChoice(v string) *apierror.Error {
	switch {
	case isNull(v) || v[0] == '{':
		return nil
	case v[0] != '"':
		return errType("tool_choice", "a string or an object", v)
	}
	switch c := str(v); c {
	case "none", "auto", "required":
		return nil
	default:
		return apierror.InvalidParam("tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", clip(c))
	}
}

// checkNumber validates an optional numeric parameter against [lo, hi];
// integer requires an integral value.
func checkNumber(name, v string, lo, hi float64, integer bool) *apierror.Error {
	if isNull(v) {
		return nil
	}
	want := "a number"
	if integer {
		want = "an integer"
	}
	if c := v[0]; c != '-' && (c < '0' || c > '9') {
		return errType(name, want, v)
	}
	// Valid JSON numbers always parse; an out-of-range one becomes ±Inf,
	// which the bounds below reject.
	x, _ := strconv.ParseFloat(v, 64)
	if integer && x != math.Trunc(x) {
		return errType(name, want, v)
	}
	kind := "decimal"
	if integer {
		kind = "integer"
	}
	switch {
	case x < lo:
		return &apierror.Error{Status: http.StatusBadRequest, Code: kind + "_below_min_value", Param: name,
			Message: fmt.Sprintf("Invalid '%s': %s below minimum value. Expected a value >= %g, but got %s instead.", name, kind, lo, clip(v))}
	case x > hi:
		return &apierror.Error{Status: http.StatusBadRequest, Code: kind + "_above_max_value", Param: name,
			Message: fmt.Sprintf("Invalid '%s': %s above maximum value. Expected a value <= %g, but got %s instead.", name, kind, hi, clip(v))}
	}
	return nil
}

// errType is OpenAI's 400 for a parameter of the wrong JSON type.
func errType(param, want, raw string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type", Param: param,
		Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonKind(raw))}
}

func jsonKind(raw string) string {
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	if x, _ := strconv.ParseFloat(raw, 64); x == math.Trunc(x) {
		return "an integer"
	}
	return "a decimal"
}

// clip bounds client-supplied text echoed in error messages.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
