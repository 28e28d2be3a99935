package gemini

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
)

// now is the clock for "created"; tests replace it.
var now = time.Now

// TranslateResponse turns a Gemini generateContent answer into an OpenAI
// chat completion for clientModel (the model name the client asked for).
// For a 2xx status the error is nil; otherwise, and for a 2xx body that is
// not a Gemini response, the error is the *apierror.Error the answer
// translates to (its Status and Headers are the ones to send) and the bytes
// are its JSON body.
func TranslateResponse(status int, body []byte, clientModel string) ([]byte, error) {
	if status < 200 || status > 299 {
		e := upstreamError(status, body, clientModel)
		return e.JSON(), e
	}
	if !gjson.ValidBytes(body) {
		e := malformed("response")
		return e.JSON(), e
	}
	root := gjson.Parse(translate.BytesString(body))
	if !root.IsObject() {
		e := malformed("response")
		return e.JSON(), e
	}
	var r geminiResponse
	r.read(root)

	out := make([]byte, 0, len(body)+256)
	out = append(out, `{"id":"chatcmpl-`...)
	if id := r.id(); id != "" {
		out = append(out, id...)
	} else {
		sum := sha256.Sum256(body)
		out = hex.AppendEncode(out, sum[:12])
	}
	out = append(out, '"')
	out = translate.AppendEnvelope(out, translate.Completion, now().Unix(), clientModel)
	out = append(out, `,"choices":[`...)
	n := 0
	r.candidates.ForEach(func(_, c gjson.Result) bool {
		if n > 0 {
			out = append(out, ',')
		}
		out = appendChoice(out, r.respID.Str, n, c)
		n++
		return true
	})
	if n == 0 {
		// No candidates: the prompt was blocked (or, unexpectedly, nothing
		// came back). Clients still need a choice to read.
		finish := "stop"
		if r.blocked() {
			finish = "content_filter"
		}
		out = append(out, `{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"`...)
		out = append(out, finish...)
		out = append(out, `"}`...)
	}
	out = append(out, `],"usage":`...)
	out = usageFrom(r.usage).append(out)
	return append(out, '}'), nil
}

// geminiResponse holds the members of a GenerateContentResponse, read in
// one pass.
type geminiResponse struct {
	candidates, usage, feedback, respID, err gjson.Result
}

func (r *geminiResponse) read(root gjson.Result) {
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "candidates":
			r.candidates = v
		case "usageMetadata":
			r.usage = v
		case "promptFeedback":
			r.feedback = v
		case "responseId":
			r.respID = v
		case "error":
			r.err = v
		}
		return true
	})
}

// id is the response id usable in an OpenAI id as is, or "".
func (r *geminiResponse) id() string {
	raw := r.respID.Raw
	if r.respID.Type != gjson.String || raw == `""` || strings.IndexByte(raw, '\\') >= 0 {
		return ""
	}
	return inner(raw)
}

func (r *geminiResponse) blocked() bool {
	return r.feedback.Get("blockReason").Str != ""
}

// appendChoice appends the chat completion choice for candidate c, the pos'th.
func appendChoice(dst []byte, respID string, pos int, c gjson.Result) []byte {
	var cand candidate
	cand.read(c, pos)
	dst = append(dst, `{"index":`...)
	dst = appendInt(dst, int64(cand.index))
	dst = append(dst, `,"message":{"role":"assistant","content":`...)
	if cand.texts > 0 {
		dst = cand.appendText(dst)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"refusal":null`...)
	if cand.calls > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		cand.eachCall(func(k int, fc gjson.Result) {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendToolCall(dst, -1, respID, cand.index, k, fc)
		})
		dst = append(dst, ']')
	}
	dst = append(dst, `,"annotations":[]},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, finishReason(cand.finish.Str, cand.calls > 0)...)
	return append(dst, `"}`...)
}

// candidate holds the members of one candidate, and what its parts hold,
// found in one pass: a stream translates every candidate of every event.
type candidate struct {
	index  int
	parts  gjson.Result
	finish gjson.Result

	texts, calls int // text parts of the answer (thoughts are not), function calls
	// The first of them; more are found by walking the parts again.
	text [8]string // raw JSON strings
	call [4]gjson.Result
}

func (c *candidate) read(v gjson.Result, pos int) {
	c.index = pos // Gemini leaves out index 0, as proto3 JSON does with zeros
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			c.index = int(v.Int())
		case "content":
			c.parts = v.Get("parts")
		case "finishReason":
			c.finish = v
		}
		return true
	})
	c.parts.ForEach(func(_, p gjson.Result) bool {
		text, fc, answer := partOf(p)
		if answer {
			if c.texts < len(c.text) {
				c.text[c.texts] = text
			}
			c.texts++
		}
		if fc.IsObject() {
			if c.calls < len(c.call) {
				c.call[c.calls] = fc
			}
			c.calls++
		}
		return true
	})
}

// partOf reads a part: its text, if it is answer text (not empty, not a
// thought), and its function call.
func partOf(p gjson.Result) (text string, fc gjson.Result, answer bool) {
	var t gjson.Result
	thought := false
	p.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "text":
			t = v
		case "thought":
			thought = v.Type == gjson.True
		case "functionCall":
			fc = v
		}
		return true
	})
	return t.Raw, fc, t.Type == gjson.String && t.Raw != `""` && !thought
}

// appendText appends the candidate's text parts joined, as one JSON string.
// The parts are JSON strings already: their escaped insides are copied.
func (c *candidate) appendText(dst []byte) []byte {
	dst = append(dst, '"')
	if c.texts <= len(c.text) {
		for _, t := range c.text[:c.texts] {
			dst = append(dst, inner(t)...)
		}
	} else {
		c.parts.ForEach(func(_, p gjson.Result) bool {
			if text, _, answer := partOf(p); answer {
				dst = append(dst, inner(text)...)
			}
			return true
		})
	}
	return append(dst, '"')
}

// eachCall calls fn with every function call, in order.
func (c *candidate) eachCall(fn func(k int, fc gjson.Result)) {
	if c.calls <= len(c.call) {
		for k, fc := range c.call[:c.calls] {
			fn(k, fc)
		}
		return
	}
	k := 0
	c.parts.ForEach(func(_, p gjson.Result) bool {
		if _, fc, _ := partOf(p); fc.IsObject() {
			fn(k, fc)
			k++
		}
		return true
	})
}

// appendToolCall appends an OpenAI tool call for a Gemini functionCall; index
// (stream chunks only) is left out when negative.
func appendToolCall(dst []byte, index int, respID string, cand, pos int, fc gjson.Result) []byte {
	name, args := fc.Get("name"), fc.Get("args")
	argsRaw := args.Raw
	if !args.IsObject() {
		argsRaw = "{}"
	}
	dst = append(dst, '{')
	if index >= 0 {
		dst = append(dst, `"index":`...)
		dst = appendInt(dst, int64(index))
		dst = append(dst, ',')
	}
	dst = append(dst, `"id":"`...)
	dst = appendCallID(dst, respID, cand, pos, name.Str, argsRaw)
	dst = append(dst, `","type":"function","function":{"name":`...)
	if name.Type == gjson.String {
		dst = append(dst, name.Raw...)
	} else {
		dst = append(dst, `""`...)
	}
	dst = append(dst, `,"arguments":`...)
	dst = appendCompactString(dst, argsRaw)
	return append(dst, "}}"...)
}

// appendCallID appends a tool call id. Gemini's calls have none (clients need
// one to answer them), so it is derived from what identifies the call, the
// same way for a JSON answer and a stream.
func appendCallID(dst []byte, respID string, cand, pos int, name, args string) []byte {
	h := sha256.New()
	var buf [40]byte
	b := append(buf[:0], respID...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(cand), 10)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(pos), 10)
	b = append(b, 0)
	h.Write(b)
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(args))
	var sum [sha256.Size]byte
	dst = append(dst, "call_"...)
	return hex.AppendEncode(dst, h.Sum(sum[:0])[:12])
}

// finishReason maps Gemini's finishReason to OpenAI's.
func finishReason(r string, calls bool) string {
	switch r {
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY":
		return "content_filter"
	}
	if calls {
		return "tool_calls"
	}
	return "stop"
}

// usage is OpenAI's usage, from Gemini's usageMetadata.
type usage struct {
	prompt, completion, total, cached, reasoning int64
}

func usageFrom(u gjson.Result) usage {
	var out usage
	var candidates, thoughts, toolPrompt, total int64
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "promptTokenCount":
			out.prompt = v.Int()
		case "candidatesTokenCount":
			candidates = v.Int()
		case "thoughtsTokenCount":
			thoughts = v.Int()
		case "toolUsePromptTokenCount":
			toolPrompt = v.Int()
		case "cachedContentTokenCount":
			out.cached = v.Int()
		case "totalTokenCount":
			total = v.Int()
		}
		return true
	})
	out.prompt += toolPrompt
	out.completion = candidates + thoughts
	out.reasoning = thoughts
	out.total = out.prompt + out.completion
	if total > out.total {
		out.total = total // counts Gemini bills that have no OpenAI field
	}
	return out
}

func (u usage) append(dst []byte) []byte {
	return translate.Usage{Prompt: u.prompt, Completion: u.completion, Total: u.total, Cached: u.cached,
		Reasoning: u.reasoning, ReasoningDetails: true}.Append(dst)
}
