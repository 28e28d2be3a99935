package fake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// choice is what the fake "generated" for one choice, in a form both the
// JSON and the streaming writers render from, so the two always agree.
type choice struct {
	// pieces are the text reply split into stream chunks: one word each, with
	// the whitespace before it. Their concatenation is the message content.
	pieces []string
	// call is set when the choice is a tool call instead of text.
	call   *toolCall
	finish string // stop, length or tool_calls
}

type toolCall struct {
	id, name, arguments string
	nargs               int
	fragments           []string // arguments, split for streaming
}

func (c *choice) content() string { return strings.Join(c.pieces, "") }

// tokens counts completion tokens: a word per piece, or for a tool call 1 for
// the name plus 1 per argument.
func (c *choice) tokens() int {
	if c.call != nil {
		return 1 + c.call.nargs
	}
	return len(c.pieces)
}

// reply is the complete generated answer to one request.
type reply struct {
	id               string
	choices          []choice
	promptTokens     int
	completionTokens int
	// cachedTokens of the prompt came from the prompt cache; cacheOn says
	// the fake caches (and so reports prompt_tokens_details).
	cachedTokens int
	cacheOn      bool
}

// generate builds the deterministic reply to req. body is the raw request,
// hashed for ids; chunks is the x-fake-chunks override (-1 for none).
func generate(req *chatRequest, body []byte, chunks int) *reply {
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	r := &reply{id: "chatcmpl-" + digest[:24], choices: make([]choice, req.n)}

	for i := range req.Messages {
		r.promptTokens += max(1, len(strings.Fields(req.Messages[i].text())))
	}

	var base string
	var args string
	var nargs int
	var frags []string
	switch last := &req.Messages[len(req.Messages)-1]; {
	case req.tool != nil:
		args, nargs = sampleArguments(req.tool)
		frags = splitArguments(args, argumentFragments)
	case req.jsonOut:
		base = sampleText(req.schema, lastUserText(req.Messages))
	case last.Role == "tool":
		base = "The tool returned: " + last.text()
	default:
		base = "Echo: " + lastUserText(req.Messages)
	}

	for i := range r.choices {
		c := &r.choices[i]
		if req.tool != nil {
			c.call = &toolCall{
				id:   "call_" + digest[24:48] + strconv.Itoa(i),
				name: req.tool.Name, arguments: args, nargs: nargs, fragments: frags,
			}
			c.finish = "tool_calls"
		} else {
			text := base
			if i > 0 && !req.jsonOut { // a prefix would spoil the JSON
				text = "(choice " + strconv.Itoa(i) + ") " + text
			}
			c.pieces, c.finish = shapeText(strings.TrimSpace(text), req, chunks)
		}
		r.completionTokens += c.tokens()
	}
	return r
}

func lastUserText(msgs []chatMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].text()
		}
	}
	return ""
}

// filler pads replies for x-fake-chunks.
var filler = strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua")

// shapeText applies, in order, the x-fake-chunks length, the stop sequences
// and the token limit to text, returning its stream pieces and finish reason.
// Stop is applied before the limit so that a stop sequence beyond the limit
// still ends in "length", as with a real model.
func shapeText(text string, req *chatRequest, chunks int) ([]string, string) {
	pieces := splitPieces(text)
	if chunks >= 0 {
		for i := 0; len(pieces) < chunks; i++ {
			pieces = append(pieces, " "+filler[i%len(filler)])
		}
		pieces = pieces[:chunks]
	}
	if len(req.stops) > 0 {
		text := strings.Join(pieces, "")
		cut := -1
		for _, s := range req.stops {
			if i := strings.Index(text, s); i >= 0 && (cut < 0 || i < cut) {
				cut = i
			}
		}
		if cut >= 0 {
			pieces = splitPieces(text[:cut])
		}
	}
	if req.maxWords >= 0 && len(pieces) > req.maxWords {
		return pieces[:req.maxWords], "length"
	}
	return pieces, "stop"
}

// splitPieces splits s into one piece per word, each carrying the whitespace
// before it (the first also any leading whitespace, the last any trailing), so
// concatenating the pieces gives back s. Whitespace alone yields no pieces.
func splitPieces(s string) []string {
	var pieces []string
	start := 0 // start of the current piece
	inWord := false
	words := 0
	for i, r := range s {
		if unicode.IsSpace(r) {
			if inWord {
				// Whitespace after a word begins the next piece, unless it
				// is trailing (handled after the loop).
				pieces = append(pieces, s[start:i])
				start = i
			}
			inWord = false
			continue
		}
		if !inWord {
			words++
		}
		inWord = true
	}
	if words == 0 {
		return nil
	}
	if inWord {
		return append(pieces, s[start:])
	}
	// Trailing whitespace: glue it to the last word's piece.
	if len(pieces) > 0 && start < len(s) {
		pieces[len(pieces)-1] += s[start:]
	}
	return pieces
}

// sampleArguments builds the arguments of a call to f from its parameters
// schema (sampleJSON: string "sample", number and integer 1, boolean true,
// nested objects and arrays filled in), returning them and how many there
// are. Keys come out sorted, which keeps the arguments deterministic.
func sampleArguments(f *chatFunction) (string, int) {
	args, ok := sampleJSON(f.Parameters, false, "").(map[string]any)
	if !ok {
		args = map[string]any{}
	}
	b, err := json.Marshal(args)
	if err != nil { // cannot happen: only JSON values
		panic(err)
	}
	return string(b), len(args)
}

// splitArguments cuts a tool call's arguments into a few stream fragments, on
// rune boundaries so every fragment stays valid UTF-8 inside its JSON string.
func splitArguments(args string, parts int) []string {
	if len(args) == 0 {
		return nil
	}
	size := max(1, (len(args)+parts-1)/parts)
	var frags []string
	for len(args) > 0 {
		n := min(size, len(args))
		for n < len(args) && !utf8.RuneStart(args[n]) {
			n++
		}
		frags = append(frags, args[:n])
		args = args[n:]
	}
	return frags
}
