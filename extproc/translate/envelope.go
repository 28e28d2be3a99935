package translate

import (
	"strconv"

	"github.com/switchyard-ai/switchyard/internal/jsonquote"
)

// The objects of OpenAI's chat completion envelope.
const (
	Completion = "chat.completion"       // a whole answer
	Chunk      = "chat.completion.chunk" // one event of a stream
)

// AppendEnvelope appends the members an OpenAI chat completion or chunk
// (object) carries after its id: `,"object":…,"created":…,"model":…`, model
// being the name the client asked for.
func AppendEnvelope(dst []byte, object string, created int64, model string) []byte {
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = AppendInt(dst, created)
	dst = append(dst, `,"model":`...)
	return AppendString(dst, model)
}

// Usage is an OpenAI completion's token usage.
type Usage struct {
	Prompt, Completion, Total int64
	Cached                    int64 // prompt tokens read from the provider's cache
	// Reasoning is the completion tokens spent thinking, written (as
	// completion_tokens_details) only with ReasoningDetails.
	Reasoning        int64
	ReasoningDetails bool
}

// Append appends u as OpenAI's usage object.
func (u Usage) Append(dst []byte) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = AppendInt(dst, u.Prompt)
	dst = append(dst, `,"completion_tokens":`...)
	dst = AppendInt(dst, u.Completion)
	dst = append(dst, `,"total_tokens":`...)
	dst = AppendInt(dst, u.Total)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = AppendInt(dst, u.Cached)
	if u.ReasoningDetails {
		dst = append(dst, `},"completion_tokens_details":{"reasoning_tokens":`...)
		dst = AppendInt(dst, u.Reasoning)
	}
	return append(dst, "}}"...)
}

// AppendString appends s as a JSON string (jsonquote.Append).
func AppendString(dst []byte, s string) []byte { return jsonquote.Append(dst, s) }

// AppendInt appends n in decimal.
func AppendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
