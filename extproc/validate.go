package extproc

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/switchyard-ai/switchyard/internal/apierror"
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
	fPromptCacheKey
	fResponseFormat
	numFields
)

var fieldNames = [numFields]string{
	"model", "messages", "temperature", "top_p", "presence_penalty", "frequency_penalty", "stop", "n",
	"max_tokens", "max_completion_tokens", "stream", "stream_options", "tools", "tool_choice",
	"prompt_cache_key", "response_format",
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
	case "prompt_cache_key":
		return fPromptCacheKey
	case "response_format":
		return fResponseFormat
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
	// The prompt's size for the token estimate (estimatePromptTokens):
	// bytes of the messages' text and the number of messages.
	textBytes, messages int64
	// prefixEnd is the offset just past the first user message (0 if
	// none): the messages up to it start the conversation's stable
	// prefix (affinity.go).
	prefixEnd int
}

// parseChat validates a chat completion request body as OpenAI does and
// returns what routing needs. The body is read in place, in one pass
// (jsonscan.go), and not modified.
func parseChat(body []byte) (chatRequest, *apierror.Error) {
	var r chatRequest
	s := bytesString(body)
	start := skipSpace(s, 0)
	if start < len(s) && s[start] != '{' {
		if !validJSON(s) {
			return r, apierror.InvalidJSON()
		}
		return r, &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type",
			Message: "The request body must be a JSON object."}
	}
	dup := -1
	var msgs messageScan
	end := -1
	if start < len(s) {
		end = scanObject(s, start, 1, func(key string, v int) int {
			f := fieldIndex(key)
			var e int
			if f == fMessages && s[v] == '[' && !r.fields[fMessages].present() {
				e = msgs.scan(s, v)
			} else {
				e = scanValue(s, v, 2)
			}
			if e < 0 {
				return -1
			}
			r.end = e
			if f >= 0 {
				// Parsers disagree on duplicate keys (gjson takes the
				// first, most providers the last), so a duplicate could
				// make the gateway route and bill one model while the
				// provider serves another. Refuse them.
				if r.fields[f].present() {
					if dup < 0 {
						dup = f
					}
				} else {
					r.fields[f] = span{v, e}
				}
			}
			return e
		})
	}
	if end < 0 || skipSpace(s, end) != len(s) {
		return r, apierror.InvalidJSON()
	}
	if dup >= 0 {
		return r, apierror.InvalidParam(fieldNames[dup], "Duplicate key '%s' in the request body.", fieldNames[dup])
	}
	r.textBytes, r.messages = msgs.textBytes, msgs.n
	r.prefixEnd = msgs.prefixEnd
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
	switch v := raw(fMessages); {
	case isNull(v):
		return r, apierror.MissingParam("messages")
	case v[0] != '[':
		return r, errType("messages", "an array", v)
	case msgs.err != nil:
		return r, msgs.err
	case msgs.n == 0:
		return r, &apierror.Error{Status: http.StatusBadRequest, Code: "empty_array", Param: "messages",
			Message: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."}
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
	if e := validateResponseFormat(raw(fResponseFormat)); e != nil {
		return r, e
	}
	return r, nil
}

// validateResponseFormat checks response_format's type against the spec,
// for every provider kind: a type a translator does not know would
// otherwise reach an OpenAI-kind provider as is, or be refused only by some
// translators, under different names. A duplicate type is refused as a
// duplicate model is: parsers disagree on which one counts.
func validateResponseFormat(v string) *apierror.Error {
	if isNull(v) {
		return nil
	}
	if v[0] != '{' {
		return errType("response_format", "an object", v)
	}
	typ := ""
	for it := newIter(v, 0); it.next(); {
		if it.key != "type" {
			continue
		}
		if typ != "" {
			return apierror.InvalidParam("response_format.type", "Duplicate key 'type' in 'response_format'.")
		}
		if typ = it.raw(); typ[0] != '"' {
			return errType("response_format.type", "one of 'text', 'json_object' or 'json_schema'", typ)
		}
	}
	if typ == "" {
		return apierror.MissingParam("response_format.type")
	}
	switch t := str(typ); t {
	case "text", "json_object", "json_schema":
		return nil
	default:
		return apierror.InvalidParam("response_format.type", "Invalid value: '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", clip(t))
	}
}

// messageScan validates the messages array while the body is scanned, so
// that a prompt of megabytes is read once: each message's members are
// noted as the scanner passes them, checked when the message ends, and its
// text counted for the token estimate.
type messageScan struct {
	n         int64
	err       *apierror.Error // the first invalid message's
	textBytes int64
	prefixEnd int // just past the first user message
}

// scan validates the array at s[i] (nesting depth 2) and returns the offset
// just past it, or -1 if it is not valid JSON.
func (m *messageScan) scan(s string, i int) int {
	return scanArray(s, i, 2, func(idx, v int) int {
		m.n++
		if s[v] != '{' {
			e := scanValue(s, v, 3)
			if e >= 0 && m.err == nil {
				m.err = errType(msgParam(idx, ""), "an object", s[v:e])
			}
			return e
		}
		var role, content, toolCalls, functionCall, toolCallID string
		// Text for the estimate, by member (a duplicate replaces).
		var contentText, nameText, toolText int64
		e := scanObject(s, v, 3, func(key string, fv int) int {
			var fe int
			switch {
			case key == "content" && s[fv] == '[':
				contentText = 0
				fe = scanArray(s, fv, 4, func(_, pv int) int {
					if s[pv] != '{' {
						return scanValue(s, pv, 5)
					}
					var text int64
					pe := scanObject(s, pv, 5, func(key string, tv int) int {
						te := scanValue(s, tv, 6)
						if key == "text" && te >= 0 {
							text = stringText(s[tv:te])
						}
						return te
					})
					contentText += text
					return pe
				})
			case key == "tool_calls" && s[fv] == '[':
				toolText = 0
				fe = scanArray(s, fv, 4, func(_, cv int) int {
					if s[cv] != '{' {
						return scanValue(s, cv, 5)
					}
					var text int64
					ce := scanObject(s, cv, 5, func(key string, fnv int) int {
						if key != "function" || s[fnv] != '{' {
							return scanValue(s, fnv, 6)
						}
						var name, args int64
						fne := scanObject(s, fnv, 6, func(key string, av int) int {
							ae := scanValue(s, av, 7)
							if ae >= 0 {
								switch key {
								case "name":
									name = stringText(s[av:ae])
								case "arguments":
									args = stringText(s[av:ae])
								}
							}
							return ae
						})
						text = name + args
						return fne
					})
					toolText += text
					return ce
				})
			default:
				fe = scanValue(s, fv, 4)
			}
			if fe < 0 {
				return -1
			}
			switch raw := s[fv:fe]; key {
			case "role":
				role = raw
			case "content":
				content = raw
				if raw[0] != '[' {
					contentText = stringText(raw)
				}
			case "tool_calls":
				toolCalls = raw
				if raw[0] != '[' {
					toolText = 0
				}
			case "function_call":
				functionCall = raw
			case "tool_call_id":
				toolCallID = raw
			case "name":
				nameText = stringText(raw)
			}
			return fe
		})
		if e < 0 {
			return -1
		}
		m.textBytes += contentText + nameText + toolText
		if m.prefixEnd == 0 && role == `"user"` {
			m.prefixEnd = e
		}
		if m.err == nil {
			m.err = validateMessage(int(idx), role, content, toolCalls, functionCall, toolCallID)
		}
		return e
	})
}

// stringText is the length of a raw JSON string's contents, escapes
// counted as written; 0 for other values.
func stringText(raw string) int64 {
	if raw[0] != '"' {
		return 0
	}
	return int64(len(raw) - 2)
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

func msgParam(i int, field string) string {
	if field == "" {
		return fmt.Sprintf("messages[%d]", i)
	}
	return fmt.Sprintf("messages[%d].%s", i, field)
}

// validateMessage checks one message object from its members' raw values
// ("" for absent ones).
func validateMessage(i int, role, content, toolCalls, functionCall, toolCallID string) *apierror.Error {
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
