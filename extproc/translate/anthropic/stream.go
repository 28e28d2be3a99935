package anthropic

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/sse"
)

// maxBlocks bounds the content block index a stream may use, so a corrupt
// index cannot make the Stream allocate without limit. Real messages have a
// handful of blocks.
const maxBlocks = 1 << 12

type blockKind uint8

const (
	blockOther blockKind = iota // thinking, server tools: not forwarded
	blockText
	blockTool
	blockAnswer // StructuredTool's call: its input streams as content
)

// block is what the Stream knows of one Anthropic content block.
type block struct {
	kind blockKind
	tool int  // for blockTool: the OpenAI tool call index
	args bool // for blockTool: some arguments were sent
}

// Stream translates one Anthropic Messages event stream into an OpenAI chat
// completion chunk stream. It is not safe for concurrent use; use one per
// response.
type Stream struct {
	model   string
	created int64

	split sse.Splitter
	feed  func(sse.Event) error // s.event, bound once so Translate does not allocate
	out   []byte                // dst, while Translate runs

	// head opens every chunk: `data: {"id":...,"model":...,"choices":[`.
	head []byte

	started  bool // the role chunk was sent
	finished bool // the finish_reason chunk was sent
	done     bool // message_stop, an error or a failure: nothing more is sent
	err      error

	blocks []block // by Anthropic content block index
	tools  int     // tool calls so far
	usage  usage

	reply    Reply
	answered bool // a structured answer was streamed
}

// NewStream returns a Stream whose chunks name clientModel.
func NewStream(clientModel string) *Stream { return Reply{}.NewStream(clientModel) }

// NewStream is the package's NewStream for a request TranslateChatReply
// marked with r.
func (r Reply) NewStream(clientModel string) *Stream {
	s := &Stream{model: clientModel, created: time.Now().Unix(), reply: r}
	s.feed = s.event
	return s
}

// Chunk framing around a choice's delta.
const (
	choiceOpen = `{"index":0,"delta":`
	chunkTail  = `,"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"
)

// Translate consumes one chunk of Anthropic's event stream (at arbitrary
// boundaries; eos marks the last) and appends the OpenAI SSE bytes it yields
// to dst: "data: {chunk}\n\n" events, and at message_stop a usage chunk with
// "choices":[] followed by "data: [DONE]\n\n". Every chunk carries
// "usage":null except that last one, as OpenAI streams do with include_usage.
//
// An Anthropic error event becomes an event whose JSON has a top-level
// "error" in OpenAI's shape, and ends the stream (no [DONE], as with OpenAI).
// That is a faithful translation and returns no error.
//
// A stream that cannot be translated (malformed events, or eos before
// message_stop) gets such an error event too, and Translate returns an error
// wrapping an *apierror.Error. Either way dst holds what to forward. Once
// the stream has ended, later calls return dst unchanged (and the same
// error).
func (s *Stream) Translate(dst, chunk []byte, eos bool) ([]byte, error) {
	if s.done {
		return dst, s.err
	}
	s.out = dst
	if err := s.split.Feed(chunk, eos, s.feed); err != nil {
		// The callback fails with an *apierror.Error; the splitter with
		// its own errors (an event past its size limit).
		if e, ok := errors.AsType[*apierror.Error](err); ok {
			s.fail(e)
			s.err = fmt.Errorf("anthropic: stream: %w", e)
		} else {
			e := badUpstream("The upstream provider sent an event stream that could not be read.")
			s.fail(e)
			s.err = fmt.Errorf("anthropic: stream: %w: %w", err, e)
		}
	} else if eos && !s.done {
		e := apierror.Server(http.StatusBadGateway, "upstream_stream_incomplete",
			"The upstream provider's stream ended before the message was complete.")
		s.fail(e)
		s.err = fmt.Errorf("anthropic: stream: %w", e)
	}
	dst, s.out = s.out, nil
	return dst, s.err
}

// fail sends e as an OpenAI error event and ends the stream.
func (s *Stream) fail(e *apierror.Error) {
	s.out = sse.AppendData(s.out, e.JSON())
	s.done = true
}

// event translates one Anthropic event. Its data aliases the splitter's
// buffer, so everything needed is copied into s.out before returning.
func (s *Stream) event(ev sse.Event) error {
	if s.done {
		return nil
	}
	data := translate.BytesString(ev.Data)
	if !gjson.Valid(data) {
		return badUpstream("The upstream provider sent an event that is not valid JSON.")
	}
	typ := gjson.Get(data, "type").Str
	if typ == "" {
		typ = translate.BytesString(ev.Name)
	}
	switch typ {
	case "message_start":
		if !s.started {
			msg := gjson.Get(data, "message")
			s.begin(msg.Get("id"))
			s.usage.set(msg.Get("usage"))
		}
	case "content_block_start":
		return s.blockStart(data)
	case "content_block_delta":
		return s.blockDelta(data)
	case "content_block_stop":
		if b := s.blockAt(gjson.Get(data, "index")); b != nil && !b.args {
			// A call without parameters streams no arguments; OpenAI
			// clients expect a JSON object, as the non-streamed "{}".
			switch b.kind {
			case blockTool:
				b.args = true
				s.toolArgs(b.tool, `"{}"`)
			case blockAnswer:
				b.args = true
				s.content(`"{}"`)
			}
		}
	case "message_delta":
		s.begin(gjson.Result{})
		s.usage.set(gjson.Get(data, "usage"))
		if sr := gjson.Get(data, "delta.stop_reason"); sr.Type == gjson.String {
			reason := finishReason(sr.Str)
			if s.answered && s.tools == 0 && reason == "tool_calls" {
				reason = "stop" // the answer, not a call the client is to make
			}
			s.finish(reason)
		}
	case "message_stop":
		s.begin(gjson.Result{})
		s.finish("stop") // if message_delta had no stop_reason
		s.out = append(s.out, s.head...)
		s.out = append(s.out, `],"usage":`...)
		s.out = s.usage.append(s.out)
		s.out = append(s.out, "}\n\n"...)
		s.out = append(s.out, sse.Done...)
		s.done = true
	case "error":
		e := gjson.Get(data, "error")
		msg := e.Get("message").Str
		if msg == "" {
			msg = "The upstream provider reported an error."
		}
		s.fail(errorFrom(0, e.Get("type").Str, msg))
	}
	// ping, and event types added to the API later, carry nothing to send.
	return nil
}

// begin sends the role chunk, once. id is the Anthropic message id; a stream
// missing its message_start gets a random one, so that clients still see a
// well-formed stream.
func (s *Stream) begin(id gjson.Result) {
	if s.started {
		return
	}
	s.started = true
	h := append(s.head[:0], `data: {"id":`...)
	h = appendID(h, id)
	h = translate.AppendEnvelope(h, translate.Chunk, s.created, s.model)
	s.head = append(h, `,"choices":[`...)
	s.chunk(`{"role":"assistant","content":""}`)
}

// chunk sends one chunk whose delta is the JSON object delta.
func (s *Stream) chunk(delta string) {
	s.out = append(s.out, s.head...)
	s.out = append(s.out, choiceOpen...)
	s.out = append(s.out, delta...)
	s.out = append(s.out, chunkTail...)
}

// content sends a text delta; raw is a JSON string.
func (s *Stream) content(raw string) {
	s.out = append(s.out, s.head...)
	s.out = append(s.out, choiceOpen+`{"content":`...)
	s.out = append(s.out, raw...)
	s.out = append(s.out, '}')
	s.out = append(s.out, chunkTail...)
}

// toolArgs sends a fragment of tool call i's arguments; raw is a JSON string.
func (s *Stream) toolArgs(i int, raw string) {
	s.out = append(s.out, s.head...)
	s.out = append(s.out, choiceOpen+`{"tool_calls":[{"index":`...)
	s.out = appendInt(s.out, int64(i))
	s.out = append(s.out, `,"function":{"arguments":`...)
	s.out = append(s.out, raw...)
	s.out = append(s.out, "}}]}"...)
	s.out = append(s.out, chunkTail...)
}

// finish sends the finish_reason chunk, once.
func (s *Stream) finish(reason string) {
	if s.finished {
		return
	}
	s.finished = true
	s.out = append(s.out, s.head...)
	s.out = append(s.out, choiceOpen+`{},"logprobs":null,"finish_reason":"`...)
	s.out = append(s.out, reason...)
	s.out = append(s.out, `"}],"usage":null}`+"\n\n"...)
}

// blockAt returns the block at index, growing the table for a new index, or
// nil for an index out of range.
func (s *Stream) blockAt(index gjson.Result) *block {
	i := index.Int()
	if index.Type != gjson.Number || i < 0 || i >= maxBlocks {
		return nil
	}
	for int(i) >= len(s.blocks) {
		s.blocks = append(s.blocks, block{})
	}
	return &s.blocks[i]
}

func (s *Stream) blockStart(data string) error {
	s.begin(gjson.Result{})
	b := s.blockAt(gjson.Get(data, "index"))
	if b == nil {
		return badUpstream("The upstream provider sent a content block without a valid index.")
	}
	cb := gjson.Get(data, "content_block")
	switch cb.Get("type").Str {
	case "text":
		b.kind = blockText
		if t := cb.Get("text"); t.Type == gjson.String && t.Raw != `""` {
			s.content(t.Raw)
		}
	case "tool_use":
		if s.reply.isStructured(cb.Get("name")) {
			*b = block{kind: blockAnswer}
			s.answered = true
			if in := cb.Get("input"); in.IsObject() && nonEmpty(in) {
				b.args = true
				s.out = append(s.out, s.head...)
				s.out = append(s.out, choiceOpen+`{"content":`...)
				s.out = appendString(s.out, in.Raw)
				s.out = append(s.out, '}')
				s.out = append(s.out, chunkTail...)
			}
			break
		}
		*b = block{kind: blockTool, tool: s.tools}
		s.tools++
		s.out = append(s.out, s.head...)
		s.out = append(s.out, choiceOpen+`{"tool_calls":[{"index":`...)
		s.out = appendInt(s.out, int64(b.tool))
		s.out = append(s.out, `,"id":`...)
		s.out = appendStringResult(s.out, cb.Get("id"))
		s.out = append(s.out, `,"type":"function","function":{"name":`...)
		s.out = appendStringResult(s.out, cb.Get("name"))
		s.out = append(s.out, `,"arguments":""}}]}`...)
		s.out = append(s.out, chunkTail...)
		// The input is {} here and streams as input_json_delta; should
		// an upstream send it whole instead, forward it as one fragment.
		if in := cb.Get("input"); in.IsObject() && nonEmpty(in) {
			b.args = true
			s.wholeArgs(b.tool, in.Raw)
		}
	default:
		b.kind = blockOther
	}
	return nil
}

// wholeArgs sends a whole arguments object (raw JSON, not a string).
func (s *Stream) wholeArgs(i int, obj string) {
	s.out = append(s.out, s.head...)
	s.out = append(s.out, choiceOpen+`{"tool_calls":[{"index":`...)
	s.out = appendInt(s.out, int64(i))
	s.out = append(s.out, `,"function":{"arguments":`...)
	s.out = appendString(s.out, obj)
	s.out = append(s.out, "}}]}"...)
	s.out = append(s.out, chunkTail...)
}

func (s *Stream) blockDelta(data string) error {
	s.begin(gjson.Result{})
	delta := gjson.Get(data, "delta")
	switch delta.Get("type").Str {
	case "text_delta":
		if t := delta.Get("text"); t.Type == gjson.String && t.Raw != `""` {
			s.content(t.Raw)
		}
	case "input_json_delta":
		b := s.blockAt(gjson.Get(data, "index"))
		if b == nil || (b.kind != blockTool && b.kind != blockAnswer) {
			return nil // a server tool's input: not the client's call
		}
		if pj := delta.Get("partial_json"); pj.Type == gjson.String && pj.Raw != `""` {
			b.args = true
			if b.kind == blockAnswer {
				s.content(pj.Raw)
			} else {
				s.toolArgs(b.tool, pj.Raw)
			}
		}
	}
	// thinking_delta, signature_delta, citations_delta: nothing to send.
	return nil
}
