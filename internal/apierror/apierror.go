// Package apierror owns the OpenAI error shape: the typed errors Switchyard
// returns to clients and the one writer that renders them.
//
// Every component that answers a client (extproc immediate responses, the data
// plane's local replies, the backends) builds an *Error and renders it with
// JSON or Write, so clients always see
// {"error":{"message","type","param","code"}} with all four keys present.
package apierror

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Error types used in the "type" field.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
	TypeRequests       = "requests"
	TypeTokens         = "tokens"
)

// Error is a client-facing error. Status is the HTTP status; the other fields
// are rendered into the OpenAI error body. Param and Code are optional and
// rendered as null when empty.
type Error struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, when positive, is sent as the retry-after header in seconds.
	RetryAfter int
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("%d: %s", e.Status, e.Message)
}

type body struct {
	Error bodyError `json:"error"`
}

type bodyError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// JSON renders the error body.
func (e *Error) JSON() []byte {
	typ := e.Type
	if typ == "" {
		typ = TypeInvalidRequest
		if e.Status >= 500 {
			typ = TypeServer
		}
	}
	b, err := json.Marshal(body{Error: bodyError{
		Message: e.Message,
		Type:    typ,
		Param:   optional(e.Param),
		Code:    optional(e.Code),
	}})
	if err != nil { // cannot happen: only strings
		panic(err)
	}
	return b
}

// Headers returns the response headers that go with the error body.
func (e *Error) Headers() map[string]string {
	h := map[string]string{"content-type": "application/json"}
	if e.RetryAfter > 0 {
		h["retry-after"] = strconv.Itoa(e.RetryAfter)
	}
	return h
}

// Write renders the error to an http.ResponseWriter.
func (e *Error) Write(w http.ResponseWriter) {
	for k, v := range e.Headers() {
		w.Header().Set(k, v)
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

// InvalidAPIKey is the 401 for a missing, unknown or revoked key.
func InvalidAPIKey(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: msg}
}

// ModelNotFound is the 404 for a model id the gateway does not serve.
func ModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model)}
}

// InvalidParam is a 400 naming the offending request field.
func InvalidParam(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_value", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

// InvalidJSON is the 400 for a body that is not valid JSON.
func InvalidJSON() *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_json",
		Message: "We could not parse the JSON body of your request. The body must be a valid JSON object."}
}

// MissingParam is a 400 for a required field that is absent.
func MissingParam(param string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "missing_required_parameter", Param: param,
		Message: fmt.Sprintf("Missing required parameter: '%s'.", param)}
}

// TooLarge is the 413 for a request body over the configured limit.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
		Message: fmt.Sprintf("The request body exceeds the limit of %d bytes.", limit)}
}

// NotFound is the 404 for a path no route serves.
func NotFound(path string) *Error {
	return &Error{Status: http.StatusNotFound, Code: "unknown_url",
		Message: fmt.Sprintf("Unrecognized request URL (%s). Please see https://platform.openai.com/docs/api-reference.", path)}
}

// WriteMethodNotAllowed answers 405 for a method r's path does not serve,
// with the Allow header listing those it does.
func WriteMethodNotAllowed(w http.ResponseWriter, r *http.Request, allow ...string) {
	methods := strings.Join(allow, ", ")
	w.Header().Set("Allow", methods)
	(&Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
		Message: fmt.Sprintf("Method %s is not allowed on %s (allowed: %s).", r.Method, r.URL.Path, methods)}).Write(w)
}

// Allow reports whether r's method is one of methods, answering 405
// (WriteMethodNotAllowed) otherwise.
func Allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	WriteMethodNotAllowed(w, r, methods...)
	return false
}

// Server is a 5xx with a generic message; details go to logs, never to clients.
func Server(status int, code, msg string) *Error {
	return &Error{Status: status, Type: TypeServer, Code: code, Message: msg}
}
