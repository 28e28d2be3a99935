package fake

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Wire types of the chat completion object. Fields the schema requires even
// when empty (logprobs, refusal) are always rendered, as null.

type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	Usage             usage              `json:"usage"`
	ServiceTier       string             `json:"service_tier"`
	SystemFingerprint string             `json:"system_fingerprint"`
}

type completionChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     *struct{}       `json:"logprobs"` // always null
	FinishReason string          `json:"finish_reason"`
}

type responseMessage struct {
	Role        string         `json:"role"`
	Content     *string        `json:"content"`
	Refusal     *string        `json:"refusal"` // always null
	ToolCalls   []wireToolCall `json:"tool_calls,omitempty"`
	Annotations []struct{}     `json:"annotations"`
}

type wireToolCall struct {
	// Index is only sent in stream chunks.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails is reported when the fake caches prompts.
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// systemFingerprint marks responses as coming from the fake.
const systemFingerprint = "fp_switchyard_fake"

func (r *reply) usage() usage {
	u := usage{PromptTokens: r.promptTokens, CompletionTokens: r.completionTokens, TotalTokens: r.promptTokens + r.completionTokens}
	if r.cacheOn {
		u.PromptTokensDetails = &promptTokensDetails{CachedTokens: r.cachedTokens}
	}
	return u
}

func writeCompletion(w http.ResponseWriter, req *chatRequest, rep *reply) {
	out := completion{
		ID:                rep.id,
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             req.Model,
		Choices:           make([]completionChoice, len(rep.choices)),
		Usage:             rep.usage(),
		ServiceTier:       "default",
		SystemFingerprint: systemFingerprint,
	}
	for i := range rep.choices {
		c := &rep.choices[i]
		msg := responseMessage{Role: "assistant", Annotations: []struct{}{}}
		if c.call != nil {
			msg.ToolCalls = []wireToolCall{{
				ID: c.call.id, Type: "function",
				Function: wireFunction{Name: c.call.name, Arguments: &c.call.arguments},
			}}
		} else {
			s := c.content()
			msg.Content = &s
		}
		out.Choices[i] = completionChoice{Index: i, Message: msg, FinishReason: c.finish}
	}
	b, err := json.Marshal(out)
	if err != nil { // cannot happen: plain structs
		panic(err)
	}
	w.Header().Set("content-type", "application/json")
	w.Header().Set("content-length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
