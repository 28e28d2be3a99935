// Package sse owns reading and writing Server-Sent Events on byte streams
// that arrive in arbitrary chunks: event boundaries are rarely chunk
// boundaries, so a Splitter carries the unfinished tail from one chunk to the
// next.
package sse

import (
	"bytes"
	"errors"
)

// ErrEventTooLarge is returned when an unfinished event grows past the
// splitter's limit (a stream without event boundaries is not SSE).
var ErrEventTooLarge = errors.New("sse: event too large")

// DefaultMaxEvent bounds the unfinished event kept between chunks.
const DefaultMaxEvent = 1 << 20

// Event is one parsed event. Its slices alias the splitter's buffers and are
// valid only during the callback.
type Event struct {
	// Name is the "event:" field; empty for unnamed events.
	Name []byte
	// Data is the "data:" field; several data lines are joined with "\n".
	Data []byte
}

// Splitter splits a stream fed chunk by chunk into events.
type Splitter struct {
	// Max bounds the unfinished event carried between chunks; 0 means DefaultMaxEvent.
	Max   int
	carry []byte
	data  []byte // joined multi-line data, reused
}

// Feed parses chunk (after whatever was carried from earlier chunks) and calls
// fn for every complete event. With eos, a trailing event without its blank
// line is complete too. It stops at fn's first error and returns it.
func (s *Splitter) Feed(chunk []byte, eos bool, fn func(Event) error) error {
	buf := chunk
	if len(s.carry) > 0 {
		s.carry = append(s.carry, chunk...)
		buf = s.carry
	}
	pos := 0
	for i := 0; ; {
		nl := bytes.IndexByte(buf[i:], '\n')
		if nl < 0 {
			break
		}
		end := i + nl + 1
		if nl == 0 || (nl == 1 && buf[i] == '\r') { // blank line: event ends
			if err := s.emit(buf[pos:end], fn); err != nil {
				return err
			}
			pos = end
		}
		i = end
	}
	if eos && pos < len(buf) {
		if err := s.emit(buf[pos:], fn); err != nil {
			return err
		}
		pos = len(buf)
	}
	rest := buf[pos:]
	max := s.Max
	if max == 0 {
		max = DefaultMaxEvent
	}
	if len(rest) > max {
		s.carry = s.carry[:0]
		return ErrEventTooLarge
	}
	if len(s.carry) > 0 {
		s.carry = s.carry[:copy(s.carry, rest)]
	} else {
		s.carry = append(s.carry[:0], rest...)
	}
	return nil
}

// Pending reports whether an unfinished event is carried.
func (s *Splitter) Pending() bool { return len(s.carry) > 0 }

func (s *Splitter) emit(raw []byte, fn func(Event) error) error {
	var ev Event
	lines := 0
	for rest := raw; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 || line[0] == ':' { // blank or comment
			continue
		}
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "event":
			ev.Name = value
		case "data":
			lines++
			switch lines {
			case 1:
				ev.Data = value
			case 2:
				s.data = append(append(append(s.data[:0], ev.Data...), '\n'), value...)
				ev.Data = s.data
			default:
				s.data = append(append(s.data, '\n'), value...)
				ev.Data = s.data
			}
		}
	}
	if ev.Name == nil && lines == 0 {
		return nil // comments or keep-alives only
	}
	return fn(ev)
}

// AppendData appends one unnamed event carrying data (which must not contain
// newlines; JSON from encoding/json or sjson does not) to dst.
func AppendData(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// AppendEvent appends one named event to dst.
func AppendEvent(dst []byte, name string, data []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, '\n')
	return AppendData(dst, data)
}

// Done is the terminal event of an OpenAI chat completion stream.
var Done = []byte("data: [DONE]\n\n")
