// Package translate holds what the vendor translators (anthropic, gemini)
// share: the one parsed view of the OpenAI chat completion request they
// translate, and the OpenAI response envelope they write.
package translate

import (
	"unsafe"

	"github.com/tidwall/gjson"
)

// ChatRequest is the parsed view of an OpenAI chat completion request body:
// its top-level members, found in one pass by whoever read the body first
// (extproc's scanner on the request path, Parse elsewhere) so that no
// translator walks the body again to find them. Each value aliases the body,
// which must not change while the view is in use; an absent member is the
// zero gjson.Result. A value's Index is its offset in the body, so members
// can be taken in the order the client wrote them.
//
// A duplicated member keeps its last value, as the providers' parsers do.
type ChatRequest struct {
	Model, Messages, Tools, ToolChoice, ParallelToolCalls                gjson.Result
	MaxTokens, MaxCompletionTokens, Stop, Stream, StreamOptions, N, Seed gjson.Result
	Temperature, TopP, PresencePenalty, FrequencyPenalty                 gjson.Result
	User, SafetyIdentifier, PromptCacheKey, Metadata, Store, ServiceTier gjson.Result
	Logprobs, TopLogprobs, LogitBias, ResponseFormat, Audio, Modalities  gjson.Result
	ReasoningEffort, WebSearchOptions, Functions, FunctionCall           gjson.Result

	// Unknown is the first member no field above names, with its key
	// UnknownKey: a translator that refuses what it does not know reports
	// it.
	UnknownKey string
	Unknown    gjson.Result
}

// Parse fills r from body with gjson, for callers that have not scanned the
// body already. It reports false when body is not a JSON object. body must
// not change while r is in use.
func (r *ChatRequest) Parse(body []byte) bool {
	root := gjson.Parse(BytesString(body))
	if !root.IsObject() {
		return false
	}
	root.ForEach(func(k, v gjson.Result) bool {
		r.Set(k.Str, v)
		return true
	})
	return true
}

// SetRaw records the member key whose value is the JSON text raw, found at
// offset in the body.
func (r *ChatRequest) SetRaw(key, raw string, offset int) {
	v := gjson.Parse(raw)
	v.Index = offset
	r.Set(key, v)
}

// Set records the member key with value v.
func (r *ChatRequest) Set(key string, v gjson.Result) {
	if f := r.field(key); f != nil {
		*f = v
	} else if !r.Unknown.Exists() {
		r.UnknownKey, r.Unknown = key, v
	}
}

// field returns the field holding member key, nil for an unknown member.
func (r *ChatRequest) field(key string) *gjson.Result {
	switch key {
	case "model":
		return &r.Model
	case "messages":
		return &r.Messages
	case "tools":
		return &r.Tools
	case "tool_choice":
		return &r.ToolChoice
	case "parallel_tool_calls":
		return &r.ParallelToolCalls
	case "max_tokens":
		return &r.MaxTokens
	case "max_completion_tokens":
		return &r.MaxCompletionTokens
	case "stop":
		return &r.Stop
	case "stream":
		return &r.Stream
	case "stream_options":
		return &r.StreamOptions
	case "n":
		return &r.N
	case "seed":
		return &r.Seed
	case "temperature":
		return &r.Temperature
	case "top_p":
		return &r.TopP
	case "presence_penalty":
		return &r.PresencePenalty
	case "frequency_penalty":
		return &r.FrequencyPenalty
	case "user":
		return &r.User
	case "safety_identifier":
		return &r.SafetyIdentifier
	case "prompt_cache_key":
		return &r.PromptCacheKey
	case "metadata":
		return &r.Metadata
	case "store":
		return &r.Store
	case "service_tier":
		return &r.ServiceTier
	case "logprobs":
		return &r.Logprobs
	case "top_logprobs":
		return &r.TopLogprobs
	case "logit_bias":
		return &r.LogitBias
	case "response_format":
		return &r.ResponseFormat
	case "audio":
		return &r.Audio
	case "modalities":
		return &r.Modalities
	case "reasoning_effort":
		return &r.ReasoningEffort
	case "web_search_options":
		return &r.WebSearchOptions
	case "functions":
		return &r.Functions
	case "function_call":
		return &r.FunctionCall
	}
	return nil
}

// Present reports whether v is in the request and not null.
func Present(v gjson.Result) bool { return v.Exists() && v.Type != gjson.Null }

// BytesString views b as a string without copying, so gjson can parse it
// without copying every value it returns (gjson.GetBytes does copy). b must
// not change while the string is in use.
func BytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
