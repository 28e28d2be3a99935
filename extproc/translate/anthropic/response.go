package anthropic

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// finishReason maps an Anthropic stop_reason to OpenAI's finish_reason.
// Unknown or missing reasons are "stop": the message did end, and every
// client understands "stop".
func finishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	default: // end_turn, stop_sequence, pause_turn
		return "stop"
	}
}

// TranslateResponse turns an Anthropic non-streaming reply into OpenAI bytes.
// A 2xx status yields a chat.completion object for clientModel; an error
// status yields an OpenAI error body keeping the Anthropic error's meaning and
// message, to be sent with the same status.
//
// The error is non-nil only when a 2xx body cannot be translated (it is not an
// Anthropic message); it is then an *apierror.Error (502) the caller should
// answer with instead.
func TranslateResponse(status int, body []byte, clientModel string) ([]byte, error) {
	return Reply{}.Translate(status, body, clientModel)
}

// Translate is TranslateResponse for a request TranslateChatReply marked
// with r.
func (r Reply) Translate(status int, body []byte, clientModel string) ([]byte, error) {
	if status < 200 || status > 299 {
		return errorFromBody(status, body).JSON(), nil
	}
	js := translate.BytesString(body)
	if !gjson.Valid(js) {
		return nil, fmt.Errorf("anthropic: response: %w", badUpstream("The upstream provider returned a response that is not valid JSON."))
	}
	root := gjson.Parse(js)
	if t := root.Get("type").Str; t == "error" {
		return nil, fmt.Errorf("anthropic: response: %w", errorFromBody(http.StatusBadGateway, body))
	} else if t != "message" {
		return nil, fmt.Errorf("anthropic: response: %w", badUpstream("The upstream provider returned a response that is not a message."))
	}

	out := make([]byte, 0, len(body)+256)
	out = append(out, `{"id":`...)
	out = appendID(out, root.Get("id"))
	out = translate.AppendEnvelope(out, translate.Completion, time.Now().Unix(), clientModel)
	out = append(out, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)

	// Text blocks are joined; tool_use blocks become tool calls. Both keep
	// their raw JSON so that nothing is decoded.
	// A structured answer's input is the content, as a string.
	var texts []string
	var calls []gjson.Result
	answered := false
	root.Get("content").ForEach(func(_, b gjson.Result) bool {
		switch b.Get("type").Str {
		case "text":
			if t := b.Get("text"); t.Type == gjson.String {
				texts = append(texts, t.Raw)
			}
		case "tool_use":
			if !r.isStructured(b.Get("name")) {
				calls = append(calls, b)
				break
			}
			answered = true
			in := b.Get("input")
			if !in.Exists() {
				texts = append(texts, `"{}"`)
			} else {
				texts = append(texts, string(appendString(nil, in.Raw)))
			}
		}
		return true
	})
	switch {
	case len(texts) > 0:
		out = appendJoinedStrings(out, texts)
	case len(calls) > 0:
		out = append(out, "null"...) // as OpenAI answers a pure tool call
	default:
		out = append(out, `""`...)
	}
	out = append(out, `,"refusal":null`...)
	if len(calls) > 0 {
		out = append(out, `,"tool_calls":[`...)
		for k, c := range calls {
			if k > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"id":`...)
			out = appendStringResult(out, c.Get("id"))
			out = append(out, `,"type":"function","function":{"name":`...)
			out = appendStringResult(out, c.Get("name"))
			out = append(out, `,"arguments":`...)
			if in := c.Get("input"); in.IsObject() {
				out = appendString(out, in.Raw)
			} else {
				out = append(out, `"{}"`...)
			}
			out = append(out, "}}"...)
		}
		out = append(out, ']')
	}
	out = append(out, `,"annotations":[]},"logprobs":null,"finish_reason":"`...)
	reason := finishReason(root.Get("stop_reason").Str)
	if answered && len(calls) == 0 && reason == "tool_calls" {
		reason = "stop" // the answer, not a call the client is to make
	}
	out = append(out, reason...)
	out = append(out, `"}],"usage":`...)
	var u usage
	u.set(root.Get("usage"))
	out = u.append(out)
	return append(out, '}'), nil
}

// appendID appends the OpenAI completion id for an Anthropic message id.
func appendID(out []byte, id gjson.Result) []byte {
	if id.Type == gjson.String && id.Str != "" {
		// The raw literal spliced after the prefix keeps any escapes intact.
		out = append(out, `"chatcmpl-`...)
		return append(out, id.Raw[1:]...)
	}
	return appendString(out, "chatcmpl-"+randomID())
}

// appendStringResult appends a string value as JSON, or "" when it is not a
// string, so the output stays valid whatever the upstream sent.
func appendStringResult(out []byte, v gjson.Result) []byte {
	if v.Type == gjson.String {
		return append(out, v.Raw...)
	}
	return append(out, `""`...)
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// usage is Anthropic's token usage. Anthropic counts cached prompt tokens
// apart from input_tokens; OpenAI's prompt_tokens includes them.
type usage struct {
	input, cacheRead, cacheCreation, output int64
}

// set overwrites the counts present in u. Counts missing from a later report
// (message_delta's usage often has only output_tokens) keep earlier values.
func (u *usage) set(v gjson.Result) {
	if !v.IsObject() {
		return
	}
	v.ForEach(func(k, n gjson.Result) bool {
		if n.Type != gjson.Number {
			return true
		}
		switch k.Str {
		case "input_tokens":
			u.input = n.Int()
		case "cache_read_input_tokens":
			u.cacheRead = n.Int()
		case "cache_creation_input_tokens":
			u.cacheCreation = n.Int()
		case "output_tokens":
			u.output = n.Int()
		}
		return true
	})
}

// append appends the OpenAI usage object.
func (u *usage) append(out []byte) []byte {
	prompt := u.input + u.cacheRead + u.cacheCreation
	return translate.Usage{Prompt: prompt, Completion: u.output, Total: prompt + u.output, Cached: u.cacheRead}.Append(out)
}

// badUpstream is the error for an upstream reply that cannot be translated.
func badUpstream(msg string) *apierror.Error {
	return apierror.Server(http.StatusBadGateway, "bad_upstream_response", msg)
}

// errorFromBody translates an Anthropic error body
// ({"type":"error","error":{"type","message"}}) received with status. A body
// that is not one (a proxy's HTML page, say) gets a message from the status.
func errorFromBody(status int, body []byte) *apierror.Error {
	e := gjson.Get(translate.BytesString(body), "error")
	typ, msg := e.Get("type").Str, e.Get("message").Str
	if msg == "" {
		msg = fmt.Sprintf("The upstream provider answered %d %s.", status, http.StatusText(status))
	}
	return errorFrom(status, typ, msg)
}

// errorFrom maps an Anthropic error type to OpenAI's type and code, keeping
// the message. status 0 means "unknown" (an error event in a stream) and is
// taken from the type.
func errorFrom(status int, typ, msg string) *apierror.Error {
	e := &apierror.Error{Status: status, Type: apierror.TypeInvalidRequest, Message: msg}
	nominal := http.StatusBadRequest
	switch typ {
	case "invalid_request_error":
	case "authentication_error":
		nominal, e.Code = http.StatusUnauthorized, "invalid_api_key"
	case "billing_error":
		nominal, e.Code = http.StatusPaymentRequired, "insufficient_quota"
	case "permission_error":
		nominal, e.Code = http.StatusForbidden, "permission_denied"
	case "not_found_error":
		nominal, e.Code = http.StatusNotFound, "not_found"
	case "request_too_large":
		nominal, e.Code = http.StatusRequestEntityTooLarge, "request_too_large"
	case "rate_limit_error":
		nominal, e.Type, e.Code = http.StatusTooManyRequests, apierror.TypeRequests, "rate_limit_exceeded"
	case "timeout_error":
		nominal, e.Type, e.Code = http.StatusGatewayTimeout, apierror.TypeServer, "timeout"
	case "api_error":
		nominal, e.Type, e.Code = http.StatusInternalServerError, apierror.TypeServer, "server_error"
	case "overloaded_error":
		nominal, e.Type, e.Code = statusOverloaded, apierror.TypeServer, "server_error"
	default: // unknown or missing: go by the status
		switch {
		case status >= 500:
			e.Type, e.Code = apierror.TypeServer, "server_error"
		case status == http.StatusTooManyRequests:
			e.Type, e.Code = apierror.TypeRequests, "rate_limit_exceeded"
		}
	}
	if e.Status == 0 {
		e.Status = nominal
	}
	return e
}

// statusOverloaded is Anthropic's non-standard "overloaded" status.
const statusOverloaded = 529
