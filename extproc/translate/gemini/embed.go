package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// TranslateEmbeddingRequest turns an OpenAI embeddings request body into a
// Gemini batchEmbedContents body for upstreamModel: one request per input, in
// order, with dimensions as outputDimensionality. Token-array inputs are a
// 400: Gemini embeds text only, and its tokenizer is not OpenAI's. Gemini
// caps a batch (at 100 or more inputs, depending on the model); a larger
// one is left for Gemini to refuse.
func TranslateEmbeddingRequest(body []byte, upstreamModel string) ([]byte, error) {
	if !gjson.ValidBytes(body) {
		return nil, apierror.InvalidJSON()
	}
	var input, dims, format gjson.Result
	gjson.Parse(translate.BytesString(body)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "input":
			input = v
		case "dimensions":
			dims = v
		case "encoding_format":
			format = v
		}
		return true
	})
	if format.Exists() && format.Type != gjson.Null && format.Str != "float" && format.Str != "base64" {
		return nil, apierror.InvalidParam("encoding_format", "Invalid value for 'encoding_format': expected 'float' or 'base64'.")
	}
	// The member every request repeats after its text.
	tail := make([]byte, 0, 48)
	if dims.Exists() && dims.Type != gjson.Null {
		if dims.Type != gjson.Number || dims.Int() < 1 || float64(dims.Int()) != dims.Num {
			return nil, apierror.InvalidParam("dimensions", "Invalid 'dimensions': expected a positive integer.")
		}
		tail = append(tail, `,"outputDimensionality":`...)
		tail = appendInt(tail, dims.Int())
	}
	tail = append(tail, '}')
	model := appendString(nil, resource(upstreamModel))

	out := make([]byte, 0, len(body)+128)
	out = append(out, `{"requests":[`...)
	add := func(text gjson.Result) {
		if out[len(out)-1] != '[' {
			out = append(out, ',')
		}
		out = append(out, `{"model":`...)
		out = append(out, model...)
		out = append(out, `,"content":{"parts":[{"text":`...)
		out = append(out, text.Raw...)
		out = append(out, `}]}`...)
		out = append(out, tail...)
	}
	switch {
	case input.Type == gjson.String:
		add(input)
	case input.IsArray():
		n := 0
		var err error
		input.ForEach(func(_, v gjson.Result) bool {
			if v.Type != gjson.String {
				err = apierror.InvalidParam("input", "Invalid 'input': Gemini embeds text only; token arrays are not supported.")
				return false
			}
			add(v)
			n++
			return true
		})
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, apierror.InvalidParam("input", "Invalid 'input': expected at least one input.")
		}
	case !input.Exists() || input.Type == gjson.Null:
		return nil, apierror.MissingParam("input")
	default:
		return nil, apierror.InvalidParam("input", "Invalid type for 'input': expected a string or an array of strings.")
	}
	return append(out, "]}"...), nil
}

// EstimateEmbeddingTokens estimates the prompt tokens of an OpenAI embeddings
// request, for the usage Gemini does not report: a token per 4 bytes of
// UTF-8 text, rounded up, and at least 1 per input (the usual rule of thumb
// for English; Gemini's own count would need a countTokens call per request).
func EstimateEmbeddingTokens(body []byte) int {
	n := 0
	count := func(v gjson.Result) {
		n += max(1, (len(v.Str)+3)/4)
	}
	input := gjson.GetBytes(body, "input")
	if input.IsArray() {
		input.ForEach(func(_, v gjson.Result) bool { count(v); return true })
	} else if input.Type == gjson.String {
		count(input)
	}
	return n
}

// TranslateEmbeddingResponse turns a Gemini batchEmbedContents answer (or an
// embedContent one) into an OpenAI embedding list for clientModel, vectors
// in input order with their index. With b64 each vector is the base64 of
// its little-endian float32 values, as OpenAI's encoding_format "base64".
// promptTokens (see EstimateEmbeddingTokens) fills usage, which Gemini does
// not report. Errors are as for TranslateResponse.
func TranslateEmbeddingResponse(status int, body []byte, clientModel string, b64 bool, promptTokens int) ([]byte, error) {
	if status < 200 || status > 299 {
		e := upstreamError(status, body, clientModel)
		return e.JSON(), e
	}
	if !gjson.ValidBytes(body) {
		e := malformed("embedding response")
		return e.JSON(), e
	}
	root := gjson.Parse(translate.BytesString(body))
	vectors := root.Get("embeddings")
	single := false
	if !vectors.IsArray() {
		vectors = root.Get("embedding")
		single = vectors.IsObject()
		if !single {
			e := malformed("embedding response")
			return e.JSON(), e
		}
	}

	out := make([]byte, 0, len(body)+128)
	out = append(out, `{"object":"list","data":[`...)
	var scratch []byte
	var err *apierror.Error
	n := 0
	emit := func(v gjson.Result) bool {
		values := v.Get("values")
		if !values.IsArray() {
			err = malformed("embedding response")
			return false
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(n), 10)
		out = append(out, `,"embedding":`...)
		if b64 {
			scratch = scratch[:0]
			values.ForEach(func(_, x gjson.Result) bool {
				scratch = binary.LittleEndian.AppendUint32(scratch, math.Float32bits(float32(x.Num)))
				return true
			})
			out = append(out, '"')
			out = base64.StdEncoding.AppendEncode(out, scratch)
			out = append(out, '"')
		} else {
			// Gemini's numbers are copied as written: no float
			// round trip can change them.
			out = append(out, '[')
			k := 0
			values.ForEach(func(_, x gjson.Result) bool {
				if x.Type != gjson.Number {
					err = malformed("embedding response")
					return false
				}
				if k > 0 {
					out = append(out, ',')
				}
				out = append(out, x.Raw...)
				k++
				return true
			})
			out = append(out, ']')
		}
		out = append(out, '}')
		n++
		return err == nil
	}
	if single {
		emit(vectors)
	} else {
		vectors.ForEach(func(_, v gjson.Result) bool { return emit(v) })
	}
	if err != nil {
		return err.JSON(), err
	}
	out = append(out, `],"model":`...)
	out = appendString(out, clientModel)
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(promptTokens), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(promptTokens), 10)
	return append(out, "}}"...), nil
}
