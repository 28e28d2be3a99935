package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

// POST /v1/embeddings in the downstream phase: the request is validated as
// OpenAI validates it, inputs longer than the model's context window are
// truncated, the request is admitted by the rate limiter and routed like a
// chat completion. The upstream phase sends it on (OpenAI-compatible
// providers) or translates it (Gemini). Usage is read from the OpenAI-shaped
// response by the same code as for chat.
//
// Truncation. OpenAI refuses an input over the model's limit; Switchyard
// cuts it to the model's context_window instead, so a client embedding long
// documents gets the embedding of their beginning rather than an error (as
// the OpenAI cookbook's recipes do client-side). Each text input is cut on a
// token boundary with the model's tokenizer (config tokenizer:
// cl100k_base, o200k_base, or the documented estimate of a token per 4
// bytes when the tokenizer is unknown), and a token-array input to its first
// context_window ids. Only the inputs that are cut are rewritten, spliced
// into the body; the rest of it is copied as is. A text cannot have more
// tokens than bytes, so inputs no longer than context_window bytes (nearly
// all of them) are never tokenized. A longer one is first tokenized only as
// far as truncatePrefixBytes bytes per allowed token, which bounds the cost
// of a huge input; only if that prefix holds fewer tokens than the window
// (extraordinarily long tokens) is the whole text tokenized.

const (
	// maxEmbeddingInputs is OpenAI's limit on the inputs of one request.
	maxEmbeddingInputs = 2048
	// truncatePrefixBytes: see the truncation note above. Ordinary text
	// averages about 4 bytes per token.
	truncatePrefixBytes = 8
)

// Top-level members of an embeddings request that the gateway reads.
const (
	eModel = iota
	eInput
	eEncodingFormat
	eDimensions
	eUser
	numEmbeddingFields
)

var embeddingFieldNames = [numEmbeddingFields]string{"model", "input", "encoding_format", "dimensions", "user"}

func embeddingFieldIndex(key string) int {
	for i, n := range embeddingFieldNames {
		if key == n {
			return i
		}
	}
	return -1
}

// embeddingInput is one input: a text (the raw JSON string at span) or
// token ids (the raw JSON array at span, of n ids).
type embeddingInput struct {
	span
	tokens bool
	n      int
}

// embeddingsRequest is what validation learns about an embeddings body.
type embeddingsRequest struct {
	fields [numEmbeddingFields]span
	model  string
	inputs []embeddingInput
	base64 bool
}

// parseEmbeddings validates an embeddings request body as OpenAI does. The
// body is read in place, validated in the same pass that finds its members
// (jsonscan.go), and not modified.
func parseEmbeddings(body []byte) (embeddingsRequest, *apierror.Error) {
	var r embeddingsRequest
	s := bytesString(body)
	start := skipSpace(s, 0)
	if start < len(s) && s[start] != '{' {
		if !validJSON(s) {
			return r, apierror.InvalidJSON()
		}
		return r, &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type",
			Message: "The request body must be a JSON object."}
	}
	// The members are noted in the same pass that validates the body; the
	// first member-level error is reported once the whole body is known
	// to be JSON.
	var memberErr *apierror.Error
	end := -1
	if start < len(s) {
		end = scanObject(s, start, 1, func(key string, v int) int {
			e := scanValue(s, v, 2)
			if e < 0 || memberErr != nil {
				return e
			}
			if key == "messages" {
				// The upstream phase tells chat from embeddings bodies by
				// this member (upstream.go), and OpenAI refuses it here too.
				memberErr = &apierror.Error{Status: http.StatusBadRequest, Code: "unknown_parameter", Param: "messages",
					Message: "Unrecognized request argument supplied: messages"}
				return e
			}
			f := embeddingFieldIndex(key)
			if f < 0 {
				return e
			}
			// As for chat: parsers disagree on duplicates, so refuse them.
			if r.fields[f].present() {
				memberErr = apierror.InvalidParam(embeddingFieldNames[f], "Duplicate key '%s' in the request body.", embeddingFieldNames[f])
				return e
			}
			r.fields[f] = span{v, e}
			return e
		})
	}
	if end < 0 || skipSpace(s, end) != len(s) {
		return r, apierror.InvalidJSON()
	}
	if memberErr != nil {
		return r, memberErr
	}
	raw := func(f int) string { return s[r.fields[f].start:r.fields[f].end] }

	model := raw(eModel)
	switch {
	case isNull(model):
		return r, apierror.MissingParam("model")
	case model[0] != '"':
		return r, errType("model", "a string", model)
	}
	if r.model = str(model); r.model == "" {
		return r, apierror.MissingParam("model")
	}
	if e := r.parseInput(s); e != nil {
		return r, e
	}
	switch v := raw(eEncodingFormat); {
	case isNull(v):
	case v[0] != '"':
		return r, errType("encoding_format", "a string", v)
	default:
		switch f := str(v); f {
		case "float":
		case "base64":
			r.base64 = true
		default:
			return r, apierror.InvalidParam("encoding_format",
				"Invalid value: '%s'. Supported values are: 'float' and 'base64'.", clip(f))
		}
	}
	if e := checkNumber("dimensions", raw(eDimensions), 1, 1<<31-1, true); e != nil {
		return r, e
	}
	if v := raw(eUser); !isNull(v) && v[0] != '"' {
		return r, errType("user", "a string", v)
	}
	return r, nil
}

// parseInput accepts OpenAI's four forms of input: a string, an array of
// strings, an array of token ids, or an array of arrays of token ids.
func (r *embeddingsRequest) parseInput(s string) *apierror.Error {
	in := r.fields[eInput]
	if !in.present() || isNull(s[in.start:in.end]) {
		return apierror.MissingParam("input")
	}
	invalid := func(format string, args ...any) *apierror.Error {
		return apierror.InvalidParam("input", format, args...)
	}
	switch s[in.start] {
	case '"':
		if in.end-in.start == 2 {
			return invalid("Invalid 'input': empty string. Expected a non-empty string.")
		}
		r.inputs = []embeddingInput{{span: in}}
		return nil
	case '[':
	default:
		return errType("input", "a string, an array of strings, an array of token ids or an array of arrays of token ids", s[in.start:in.end])
	}
	it := newIter(s, in.start)
	if !it.next() {
		return invalid("Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	switch c := s[it.val]; {
	case c >= '0' && c <= '9' || c == '-':
		// One input of token ids: the array itself.
		n, ok := tokenIDs(s, in.start)
		if !ok {
			return invalid("Invalid 'input': expected an array of token ids (non-negative integers).")
		}
		r.inputs = []embeddingInput{{span: in, tokens: true, n: n}}
		return nil
	case c == '"' || c == '[':
	default:
		return errType("input[0]", "a string or an array of token ids", it.raw())
	}
	text := s[it.val] == '"'
	for ok := true; ok; ok = it.next() {
		if it.idx >= maxEmbeddingInputs {
			return invalid("Invalid 'input': array too long. Expected an array with maximum length %d.", maxEmbeddingInputs)
		}
		sp := span{it.val, it.end}
		if text {
			if s[it.val] != '"' {
				return invalid("Invalid 'input[%d]': expected a string, like the other items.", it.idx)
			}
			if it.end-it.val == 2 {
				return invalid("Invalid 'input[%d]': empty string. Expected a non-empty string.", it.idx)
			}
			r.inputs = append(r.inputs, embeddingInput{span: sp})
			continue
		}
		n, ok := 0, s[it.val] == '['
		if ok {
			n, ok = tokenIDs(s, it.val)
		}
		switch {
		case !ok:
			return invalid("Invalid 'input[%d]': expected an array of token ids (non-negative integers), like the other items.", it.idx)
		case n == 0:
			return invalid("Invalid 'input[%d]': empty array. Expected an array with minimum length 1, but got an empty array instead.", it.idx)
		}
		r.inputs = append(r.inputs, embeddingInput{span: sp, tokens: true, n: n})
	}
	return nil
}

// tokenIDs counts the elements of the array at s[start] and reports whether
// they are all non-negative integers.
func tokenIDs(s string, start int) (int, bool) {
	it := newIter(s, start)
	for it.next() {
		v := it.raw()
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
	}
	return it.idx + 1, true
}

// embeddingsBody handles an embeddings request.
func (st *stream) embeddingsBody(ctx context.Context, body []byte) *extprocv3.ProcessingResponse {
	req, e := parseEmbeddings(body)
	if e != nil {
		return immediate(e)
	}
	rt := st.srv.routes.Load()
	mr, ok := rt.models[req.model]
	if !ok || !st.key.AllowsModel(mr.id) {
		return immediate(apierror.ModelNotFound(clip(req.model)))
	}
	if !mr.embeddings {
		return immediate(unsupportedModel(mr.id, opEmbeddings))
	}
	if req.fields[eDimensions].present() && !isNull(bytesString(body[req.fields[eDimensions].start:req.fields[eDimensions].end])) && !mr.dimensions {
		return immediate(&apierror.Error{Status: http.StatusBadRequest, Code: "unsupported_parameter", Param: "dimensions",
			Message: fmt.Sprintf("The model `%s` does not support specifying dimensions.", clip(mr.id))})
	}
	if mr.unavailable != nil {
		return immediate(mr.unavailable)
	}
	st.model, st.pricing = mr.id, mr.pricing
	edits, estimate := st.truncateInputs(body, &req, mr)
	if resp := st.checkBudget(estimate); resp != nil {
		return resp
	}
	if resp := st.admit(ctx, func() int64 { return estimate }); resp != nil {
		return resp
	}
	t := choose(mr, opEmbeddings, time.Now())
	if t == nil {
		return immediate(unsupportedModel(mr.id, opEmbeddings))
	}
	return st.route(ctx, body, mr, t, req.fields[eModel], edits)
}

// truncateInputs cuts the inputs longer than the model's context window
// (see the note at the top of this file). It returns the edits that cut
// them, in order of position (none when no input was cut), and the
// request's token estimate for admission: a
// token per 4 bytes of each text (as for chat; the raw JSON length) and the
// ids of each token array, after truncation, at least 1 per input.
func (st *stream) truncateInputs(body []byte, req *embeddingsRequest, mr *modelRoute) ([]edit, int64) {
	limit := mr.contextWindow
	var edits []edit
	var estimate int64
	var tk tokenizer.Tokenizer
	for _, in := range req.inputs {
		if in.tokens {
			if in.n > limit {
				// Keep the first limit ids: end the array after the
				// limit-th element.
				it := newIter(bytesString(body), in.start)
				for it.next() && it.idx < limit-1 {
				}
				repl := append(append([]byte(nil), body[in.start:it.end]...), ']')
				edits = append(edits, edit{in.start, in.end, repl})
			}
			estimate += int64(max(min(in.n, limit), 1))
			continue
		}
		size := in.end - in.start - 2 // raw bytes inside the quotes
		if size > limit {
			// Unescaped text is never longer than its JSON, and never
			// has more tokens than bytes: only now may it be too long.
			if tk == nil {
				var err error
				if tk, err = tokenizer.For(mr.tokenizer); err != nil {
					st.srv.log.Warn("extproc: tokenizer unavailable, using the estimate", "model", mr.id, "error", err)
					tk, _ = tokenizer.For(tokenizer.Estimate)
				}
			}
			if cut, ok := truncateText(tk, str(bytesString(body[in.start:in.end])), limit); ok {
				repl, err := json.Marshal(cut)
				if err == nil { // cannot fail: a valid UTF-8 string
					edits = append(edits, edit{in.start, in.end, repl})
					size = len(repl) - 2
				}
			}
		}
		estimate += max(int64(min((size+bytesPerToken-1)/bytesPerToken, limit)), 1)
	}
	return edits, estimate
}

// truncateText returns text cut to at most limit tokens, and whether it cut.
func truncateText(tk tokenizer.Tokenizer, text string, limit int) (string, bool) {
	if n := limit * truncatePrefixBytes; len(text) > n {
		// Tokenize a bounded prefix first (cut on a rune boundary).
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		if cut, ok := tk.Truncate(text[:n], limit); ok {
			return cut, true
		}
	}
	return tk.Truncate(text, limit)
}
