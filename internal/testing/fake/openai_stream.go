package fake

import (
	"encoding/json"
	"net/http"
	"time"
)

// Wire types of a chat.completion.chunk.

type chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	ServiceTier       string        `json:"service_tier"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	// Usage is absent unless the client asked for it with
	// stream_options.include_usage; then it is null on every chunk but the
	// last, which carries the totals. A raw message expresses all three.
	Usage json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`      // always null
	FinishReason *string   `json:"finish_reason"` // null until the last chunk
}

type delta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

// argumentFragments is how many pieces a tool call's arguments stream in.
const argumentFragments = 3

var (
	emptyString = ""
	zero        = 0
	nullJSON    = json.RawMessage("null")
)

// numEvents is how many chunks choice c streams: the role, a piece of
// content or arguments each, then the finish reason.
func (c *choice) numEvents() int {
	if c.call != nil {
		return 2 + len(c.call.fragments)
	}
	return 2 + len(c.pieces)
}

// event returns the step'th chunk choice of choice i. Events are built on
// demand so that a long x-fake-chunks stream costs no more memory than its
// text.
func (c *choice) event(i, step int) chunkChoice {
	ev := chunkChoice{Index: i}
	switch {
	case step == c.numEvents()-1:
		ev.FinishReason = &c.finish
	case c.call != nil && step == 0:
		// As OpenAI does, the role comes with the call's id, type and name;
		// the arguments follow with only the index to tie them to the call.
		ev.Delta = delta{Role: "assistant", ToolCalls: []wireToolCall{{
			Index: &zero, ID: c.call.id, Type: "function",
			Function: wireFunction{Name: c.call.name, Arguments: &emptyString},
		}}}
	case c.call != nil:
		ev.Delta.ToolCalls = []wireToolCall{{Index: &zero, Function: wireFunction{Arguments: &c.call.fragments[step-1]}}}
	case step == 0:
		ev.Delta = delta{Role: "assistant", Content: &emptyString}
	default:
		ev.Delta.Content = &c.pieces[step-1]
	}
	return ev
}

// stream writes rep as server-sent events, flushing each one. Choices are
// interleaved round-robin, as a real multi-choice stream is, so clients must
// assemble them by index. f's cut and stall faults interrupt it after their
// number of events.
func (h *openAI) stream(w http.ResponseWriter, r *http.Request, req *chatRequest, rep *reply, f fault) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("content-type", "text/event-stream; charset=utf-8")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	base := chunk{
		ID:                rep.id,
		Object:            "chat.completion.chunk",
		Created:           time.Now().Unix(),
		Model:             req.Model,
		ServiceTier:       "default",
		SystemFingerprint: systemFingerprint,
	}
	if includeUsage {
		base.Usage = nullJSON
	}

	sent := 0
	// send writes one event; false means stop (client gone).
	send := func(data []byte) bool {
		if f.interrupt(ctx, sent) {
			return false
		}
		if sent > 0 && sleep(ctx, h.opts.ChunkDelay) != nil {
			return false
		}
		buf := make([]byte, 0, len(data)+8)
		buf = append(buf, "data: "...)
		buf = append(buf, data...)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		sent++
		return rc.Flush() == nil
	}
	sendChunk := func(c *chunk) bool {
		b, err := json.Marshal(c)
		if err != nil { // cannot happen: plain structs
			panic(err)
		}
		return send(b)
	}

	for step := 0; ; step++ {
		more := false
		for i := range rep.choices {
			if step >= rep.choices[i].numEvents() {
				continue
			}
			more = true
			c := base
			ev := rep.choices[i].event(i, step)
			c.Choices = []chunkChoice{ev}
			if !sendChunk(&c) {
				return
			}
		}
		if !more {
			break
		}
	}
	if includeUsage {
		u, err := json.Marshal(rep.usage())
		if err != nil {
			panic(err)
		}
		c := base
		c.Choices = []chunkChoice{}
		c.Usage = u
		if !sendChunk(&c) {
			return
		}
	}
	send([]byte("[DONE]"))
}
