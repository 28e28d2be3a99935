package extproc

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"
)

// maxPendingEvent bounds the unfinished event kept between chunks. Chat
// completion events are a few hundred bytes; a stream without event
// boundaries is not one we understand, and is then passed through as is.
const maxPendingEvent = 1 << 20

var usageKey = []byte(`"usage"`)

// sseFilter follows a chat completion event stream chunk by chunk. It
// captures the usage event and, when drop is set (the gateway asked for
// usage the client did not), cuts that event out; when model is set, it
// replaces each event's top-level model with it (the id the client asked
// for, where an OpenAI-kind provider sends its own name).
//
// Chunks do not align with events, so the unfinished trailing event is kept
// in carry. When cutting or rewriting, it is also withheld from the client
// until it is complete: a usage event split over two chunks could not be
// cut once its first half had been forwarded. Withholding costs no
// latency, as a client cannot act on half an event.
type sseFilter struct {
	drop  bool
	model []byte // JSON string; nil: models left as they are

	carry []byte // unfinished event: forwarded already unless drop
	out   []byte // reused buffer for rewritten chunks

	usage Usage
	seen  bool // usage has been captured
	off   bool // gave up on the stream: everything passes through
	// generated is the bytes of generated text in the events seen
	// (generatedBytes): what a stream that ends before its usage event
	// is charged for besides its prompt (stream.chargeUnreported).
	generated int64
}

// chunk processes one chunk of the stream. It returns the bytes to forward
// in its place and true, or nil and false to forward it unchanged, which
// is the common case and does not allocate.
func (f *sseFilter) chunk(data []byte, eos bool) (out []byte, replace bool) {
	if f.off {
		return nil, false
	}
	buf := data
	carried := len(f.carry) > 0
	if carried {
		f.carry = append(f.carry, data...)
		buf = f.carry
	}
	// Events end with a blank line. pos is where the current event starts;
	// buf[last:pos] is kept but not yet copied to f.out (drop mode).
	pos, last, cut := 0, 0, false
	f.out = f.out[:0]
	// complete handles the event buf[pos:end]: cut, rewritten or kept.
	complete := func(end int) {
		ev := buf[pos:end]
		if f.event(ev) && f.drop {
			f.out = append(f.out, buf[last:pos]...)
			last, cut = end, true
			return
		}
		if f.model == nil {
			return
		}
		if i, j := modelValue(ev); i >= 0 && !bytes.Equal(ev[i:j], f.model) {
			f.out = append(append(f.out, buf[last:pos+i]...), f.model...)
			last, cut = pos+j, true
		}
	}
	for i := 0; ; {
		nl := bytes.IndexByte(buf[i:], '\n')
		if nl < 0 {
			break
		}
		end := i + nl + 1
		if nl == 0 || (nl == 1 && buf[i] == '\r') {
			complete(end)
			pos = end
		}
		i = end
	}
	if eos && pos < len(buf) {
		// A final event without its blank line.
		complete(len(buf))
		pos = len(buf)
	}
	if len(buf)-pos > maxPendingEvent {
		f.off = true
		pos = len(buf) // release what was withheld
	}
	if (f.drop || f.model != nil) && (carried || cut || pos < len(buf)) {
		if !carried && !cut {
			out = data[:pos] // only withholding the tail: no copy needed
		} else {
			f.out = append(f.out, buf[last:pos]...)
			out = f.out
		}
		replace = true
	}
	// Keep the unfinished event for the next chunk. out never aliases
	// carry (it is f.out or a prefix of data), so moving it is safe.
	rest := buf[pos:]
	if carried {
		f.carry = f.carry[:copy(f.carry, rest)]
	} else {
		f.carry = append(f.carry[:0], rest...)
	}
	if f.off {
		f.carry = nil
	}
	return out, replace
}

// event inspects one complete event. It captures usage from the usage event
// and reports whether the event is one to cut: it carries usage and no
// choices. An event that also carries choices is kept whole, as its content
// matters more than hiding a usage field.
func (f *sseFilter) event(ev []byte) (cut bool) {
	f.generated += generatedBytes(bytesString(ev))
	// Cheap test first: in JSON text `"usage"` can only be a key (inside
	// a string its quotes would be escaped).
	if !bytes.Contains(ev, usageKey) {
		return false
	}
	var data []byte
	n := 0
	for rest := ev; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) >= 5 && string(line[:5]) == "data:" {
			data = line[5:]
			if len(data) > 0 && data[0] == ' ' {
				data = data[1:]
			}
			n++
		}
	}
	if n != 1 {
		return false // OpenAI sends one data line per event
	}
	js := bytesString(data)
	u := gjson.Get(js, "usage")
	if !u.IsObject() {
		return false // "usage": null on ordinary chunks
	}
	f.usage, f.seen = usageFrom(u), true
	ch := gjson.Get(js, "choices")
	return !ch.Exists() || ch.Type == gjson.Null || (ch.IsArray() && emptyArray(ch.Raw))
}

// modelValue returns where the top-level model string of an event's data
// lies in ev, or -1, -1 when it has none (or more than one data line).
func modelValue(ev []byte) (start, end int) {
	data, off, n := []byte(nil), 0, 0
	for rest, at := ev, 0; len(rest) > 0; {
		line, next := rest, len(rest)
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, next = rest[:i], i+1
		}
		if len(line) >= 5 && string(line[:5]) == "data:" {
			data, off = line[5:], at+5
			n++
		}
		rest, at = rest[next:], at+next
	}
	if n != 1 || len(data) == 0 {
		return -1, -1
	}
	m := gjson.Get(bytesString(data), "model")
	if m.Type != gjson.String || m.Index <= 0 {
		return -1, -1
	}
	return off + m.Index, off + m.Index + len(m.Raw)
}

func emptyArray(raw string) bool {
	i := skipSpace(raw, 1)
	return i < len(raw) && raw[i] == ']'
}

// generatedBytes sums the lengths of the generated text in one chat
// completion chunk event: the string values of content, refusal,
// reasoning_content and (tool call) arguments, as raw JSON bytes (escapes
// slightly overcount, as in estimatePromptTokens). It only finds strings
// and the colon after a key, so it neither parses nor allocates; a
// malformed event counts what was found before the damage.
func generatedBytes(ev string) int64 {
	var n int64
	for i := 0; ; {
		q := strings.IndexByte(ev[i:], '"')
		if q < 0 {
			return n
		}
		k := i + q
		end := scanString(ev, k)
		if end < 0 {
			return n
		}
		key := ev[k+1 : end-1]
		i = end
		j := skipSpace(ev, end)
		if j >= len(ev) || ev[j] != ':' {
			continue // a value, not a key
		}
		if j = skipSpace(ev, j+1); j >= len(ev) || ev[j] != '"' {
			continue
		}
		vend := scanString(ev, j)
		if vend < 0 {
			return n
		}
		switch key {
		case "content", "refusal", "reasoning_content", "arguments":
			n += int64(vend - j - 2)
		}
		i = vend
	}
}
