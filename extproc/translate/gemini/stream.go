package gemini

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/sse"
)

// maxChoices bounds candidate indexes, as OpenAI bounds n.
const maxChoices = 128

// Stream translates one Gemini streamGenerateContent?alt=sse answer, fed
// chunk by chunk, into an OpenAI chat completion stream. Each Gemini event
// (a GenerateContentResponse) becomes chunks per candidate: the first chunk
// of a choice carries role "assistant", its text parts become one content
// delta, each function call one chunk with a complete tool_calls entry
// (Gemini sends each call whole), and the finishReason a chunk of its own
// with an empty delta and finish_reason, as OpenAI sends it. Every chunk
// has the same id (from Gemini's responseId), created and model. At the end
// of the stream come a finish chunk for any choice that did not get one, a
// usage chunk with "choices":[] from the last usageMetadata, and
// "data: [DONE]". The gateway always asks for that usage chunk and cuts it
// out again when the client did not.
//
// A Stream is not safe for concurrent use.
type Stream struct {
	model string
	split sse.Splitter

	head    []byte // `{"id":"chatcmpl-…","object":"chat.completion.chunk","created":…,"model":…,`
	respID  string
	choices []choiceState
	usage   usage
	done    bool // finished, or failed with an error event

	dst []byte // output while the splitter calls event
	err error  // why event stopped the splitter
}

type choiceState struct {
	seen     bool // chunks were sent for this choice
	role     bool // the role was sent
	finished bool
	calls    int // tool calls sent
}

// NewStream returns a Stream answering as clientModel.
func NewStream(clientModel string) *Stream {
	return &Stream{model: clientModel}
}

// errStop stops the splitter once the stream has failed.
var errStop = errors.New("gemini: stream stopped")

// Translate appends to dst the OpenAI events for chunk, the next bytes of
// the Gemini event stream (cut anywhere), and with eos the end of the
// stream. It returns dst extended. A Gemini error event becomes an OpenAI
// error event ({"error":{...}}), after which the stream is over: nothing
// more is produced, not even [DONE]. A stream that is not Gemini's SSE
// gives an *apierror.Error, with dst holding what was translated before it.
func (s *Stream) Translate(dst, chunk []byte, eos bool) ([]byte, error) {
	if s.done {
		return dst, nil
	}
	s.dst = dst
	err := s.split.Feed(chunk, eos, s.event)
	dst, s.dst = s.dst, nil
	switch {
	case err == errStop:
		if s.err != nil {
			return dst, s.err
		}
		return dst, nil
	case errors.Is(err, sse.ErrEventTooLarge):
		s.done = true
		return dst, malformed("event stream (an event is too large)")
	case err != nil:
		s.done = true
		return dst, malformed("event stream")
	}
	if eos {
		dst = s.finish(dst)
	}
	return dst, nil
}

// event translates one Gemini event into s.dst.
func (s *Stream) event(ev sse.Event) error {
	data := ev.Data
	if len(data) == 0 {
		return nil
	}
	js := translate.BytesString(data)
	if !gjson.Valid(js) {
		s.done, s.err = true, malformed("stream event")
		return errStop
	}
	root := gjson.Parse(js)
	var r geminiResponse
	r.read(root)
	if r.err.Exists() {
		e := errorFrom(0, r.err, s.model)
		s.dst = sse.AppendData(s.dst, e.JSON())
		s.done = true
		return errStop
	}
	if s.head == nil {
		s.start(r.id())
	}
	if r.usage.IsObject() {
		s.usage = usageFrom(r.usage)
	}
	n := 0
	var err error
	r.candidates.ForEach(func(_, c gjson.Result) bool {
		err = s.candidate(c, n)
		n++
		return err == nil
	})
	if err != nil {
		s.done, s.err = true, err
		return errStop
	}
	if n == 0 && r.blocked() {
		st := s.choice(0)
		if !st.finished {
			s.dst = s.appendFinish(s.dst, 0, st, "content_filter")
		}
	}
	return nil
}

// start fixes the id, created and model every chunk repeats.
func (s *Stream) start(respID string) {
	// respID points into the splitter's buffer, which the next chunk
	// overwrites.
	s.respID = strings.Clone(respID)
	s.head = append(s.head, `{"id":"chatcmpl-`...)
	if respID != "" {
		s.head = append(s.head, respID...)
	} else {
		// No responseId to derive one from: any unique id will do.
		var b [12]byte
		_, _ = rand.Read(b[:])
		s.head = hex.AppendEncode(s.head, b[:])
	}
	s.head = append(s.head, '"')
	s.head = translate.AppendEnvelope(s.head, translate.Chunk, now().Unix(), s.model)
	s.head = append(s.head, ',')
}

func (s *Stream) choice(i int) *choiceState {
	for len(s.choices) <= i {
		s.choices = append(s.choices, choiceState{})
	}
	return &s.choices[i]
}

func (s *Stream) candidate(c gjson.Result, pos int) error {
	var cand candidate
	cand.read(c, pos)
	if cand.index < 0 || cand.index >= maxChoices {
		return malformed("stream event (candidate index out of range)")
	}
	if cand.texts == 0 && cand.calls == 0 && cand.finish.Str == "" {
		return nil // nothing a client could see (usage only, or a thought)
	}
	st := s.choice(cand.index)
	finish := ""
	if cand.finish.Str != "" && !st.finished {
		finish = finishReason(cand.finish.Str, st.calls+cand.calls > 0)
	}
	// Text, each call and the finish go in chunks of their own, as OpenAI
	// streams them: openai-go's accumulator reports content or a tool call
	// as finished only when a later chunk no longer continues it.
	if cand.texts > 0 {
		dst, comma := s.openChunk(s.dst, cand.index, st)
		if comma {
			dst = append(dst, ',')
		}
		dst = append(dst, `"content":`...)
		dst = cand.appendText(dst)
		s.dst = closeChunk(dst, st, "")
	}
	if cand.calls > 0 {
		cand.eachCall(func(_ int, fc gjson.Result) {
			dst, comma := s.openChunk(s.dst, cand.index, st)
			if comma {
				dst = append(dst, ',')
			}
			dst = append(dst, `"tool_calls":[`...)
			dst = appendToolCall(dst, st.calls, s.respID, cand.index, st.calls, fc)
			st.calls++
			s.dst = closeChunk(append(dst, ']'), st, "")
		})
	}
	if finish != "" {
		s.dst = s.appendFinish(s.dst, cand.index, st, finish)
	}
	return nil
}

// openChunk appends the start of a chunk for choice i, up to the inside of
// its delta, with the role if it was not sent yet; comma reports whether
// the delta has a member already.
func (s *Stream) openChunk(dst []byte, i int, st *choiceState) (_ []byte, comma bool) {
	dst = append(dst, "data: "...)
	dst = append(dst, s.head...)
	dst = append(dst, `"choices":[{"index":`...)
	dst = appendInt(dst, int64(i))
	dst = append(dst, `,"delta":{`...)
	if !st.role {
		dst = append(dst, `"role":"assistant"`...)
		st.role, comma = true, true
	}
	st.seen = true
	return dst, comma
}

// closeChunk ends a chunk opened by openChunk, with finish as its
// finish_reason when not empty.
func closeChunk(dst []byte, st *choiceState, finish string) []byte {
	dst = append(dst, `},"finish_reason":`...)
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '"')
		dst = append(dst, finish...)
		dst = append(dst, '"')
		st.finished = true
	}
	return append(dst, "}]}\n\n"...)
}

// appendFinish appends the chunk ending choice i: an empty delta (the role
// alone if nothing came before) and finish.
func (s *Stream) appendFinish(dst []byte, i int, st *choiceState, finish string) []byte {
	dst, _ = s.openChunk(dst, i, st)
	return closeChunk(dst, st, finish)
}

// finish ends the stream: a finish_reason for every choice still open (a
// stream that ended without one, or had no content at all, still gives
// clients a complete message), the usage chunk and [DONE].
func (s *Stream) finish(dst []byte) []byte {
	s.done = true
	if s.head == nil {
		s.start("")
	}
	if len(s.choices) == 0 {
		s.choice(0)
	}
	for i := range s.choices {
		st := &s.choices[i]
		if i > 0 && !st.seen {
			continue // a gap in the candidate indexes
		}
		if !st.finished {
			dst = s.appendFinish(dst, i, st, finishReason("", st.calls > 0))
		}
	}
	dst = append(dst, "data: "...)
	dst = append(dst, s.head...)
	dst = append(dst, `"choices":[],"usage":`...)
	dst = s.usage.append(dst)
	dst = append(dst, "}\n\n"...)
	return append(dst, sse.Done...)
}
