package fake

// The OpenAI fake's embeddings endpoint, POST /v1/embeddings (and
// /embeddings), served by the NewOpenAI handler after the same fault
// injection, method check and bearer-key check as chat completions (the
// streaming-only headers, x-fake-cut-after and x-fake-chunks, do nothing
// here). Replies are deterministic and derived only from the request:
//
//   - Every input embeds to a unit vector computed from SHA-256 of its text
//     (geminiVector, the Gemini fake's function: a text embeds to the same
//     vector whichever fake serves it, at the same size). Same text, same
//     vector, whatever its position in the request. A token-array input is
//     embedded as the text "\x00tokens:" followed by its ids separated by
//     spaces, so it never takes the vector of an ordinary text.
//   - Vectors have 1536 values (text-embedding-3-small's and ada-002's size),
//     or `dimensions` values (1 to 3072), whatever the model; any model id is
//     accepted and echoed.
//   - Vectors are float32s. encoding_format "float" (the default) writes each
//     value as the shortest decimal that reads back as the same float32
//     (0.0023064255, as OpenAI does); "base64" sends the base64 of the
//     little-endian float32s. Both carry the same float32 values, but a
//     client that parses the decimals as float64 (the Go SDK does) gets
//     values that agree with the base64 ones only once narrowed to float32.
//   - Tokens follow the chat fake's rule: a text input counts its
//     whitespace-separated words, at least 1; a token-array input counts its
//     ids. usage.total_tokens equals prompt_tokens.
//   - The checks are OpenAI's: input is required, a string or an array of 1
//     to 2048 strings, non-empty; or an array of token ids (one input), or an
//     array of 1 to 2048 non-empty arrays of them; ids are non-negative
//     integers. The per-input (8192) and per-request (300,000) token limits
//     are not enforced.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

const (
	// openAIEmbedDims is the default vector size; openAIMaxEmbedDims the
	// largest accepted dimensions (text-embedding-3-large's size).
	openAIEmbedDims    = 1536
	openAIMaxEmbedDims = 3072
	// maxEmbedInputs is OpenAI's limit on the inputs of one request.
	maxEmbedInputs = 2048
)

// isEmbeddingsPath reports whether path is the embeddings endpoint.
func isEmbeddingsPath(path string) bool {
	return path == "/v1/embeddings" || path == "/embeddings"
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`

	// Derived by parseEmbeddingRequest.
	inputs []embeddingInput
	dims   int
	base64 bool
}

// embeddingInput is one input: a text, or token ids (tokens non-nil).
type embeddingInput struct {
	text   string
	tokens []int64
}

// key is the text the input's vector is derived from.
func (in *embeddingInput) key() string {
	if in.tokens == nil {
		return in.text
	}
	b := []byte("\x00tokens:")
	for i, t := range in.tokens {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, t, 10)
	}
	return string(b)
}

// promptTokens is the input's usage: its words (at least 1) or its ids.
func (in *embeddingInput) promptTokens() int {
	if in.tokens != nil {
		return len(in.tokens)
	}
	return max(1, len(strings.Fields(in.text)))
}

// parseEmbeddingRequest decodes and checks body, returning the OpenAI error a
// real upstream would give for the same mistake.
func parseEmbeddingRequest(body []byte) (*embeddingRequest, *apierror.Error) {
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typeErr.Field != "" {
			return nil, apierror.InvalidParam(typeErr.Field, "Invalid type for '%s': expected %s, but got %s.",
				typeErr.Field, typeErr.Type, typeErr.Value)
		}
		return nil, apierror.InvalidJSON()
	}
	if req.Model == "" {
		return nil, apierror.MissingParam("model")
	}
	inputs, aerr := parseEmbeddingInput(req.Input)
	if aerr != nil {
		return nil, aerr
	}
	req.inputs = inputs

	if f := req.EncodingFormat; f != nil && *f != "float" && *f != "base64" {
		return nil, apierror.InvalidParam("encoding_format", "Invalid value for 'encoding_format': '%s'. Supported values are: 'float' and 'base64'.", *f)
	}
	req.base64 = req.EncodingFormat != nil && *req.EncodingFormat == "base64"

	req.dims = openAIEmbedDims
	if d := req.Dimensions; d != nil {
		switch {
		case *d < 1:
			return nil, apierror.InvalidParam("dimensions", "Invalid 'dimensions': integer below minimum value. Expected a value >= 1, but got %d instead.", *d)
		case *d > openAIMaxEmbedDims:
			return nil, apierror.InvalidParam("dimensions", "Invalid 'dimensions': integer above maximum value. Expected a value <= %d, but got %d instead.", openAIMaxEmbedDims, *d)
		}
		req.dims = *d
	}
	return &req, nil
}

// parseEmbeddingInput accepts the four forms of input: a string, an array of
// strings, an array of token ids, or an array of arrays of token ids.
func parseEmbeddingInput(raw json.RawMessage) ([]embeddingInput, *apierror.Error) {
	invalid := func(format string, args ...any) *apierror.Error {
		return apierror.InvalidParam("input", format, args...)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, apierror.MissingParam("input")
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, apierror.InvalidJSON()
		}
		if s == "" {
			return nil, invalid("Invalid 'input': empty string. Expected a non-empty string.")
		}
		return []embeddingInput{{text: s}}, nil
	case '[':
	default:
		return nil, invalid("Invalid type for 'input': expected a string, an array of strings, an array of token ids or an array of arrays of token ids.")
	}

	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, apierror.InvalidJSON()
	}
	if len(items) == 0 {
		return nil, invalid("Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	if len(items) > maxEmbedInputs {
		return nil, invalid("Invalid 'input': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", maxEmbedInputs, len(items))
	}
	// The first item decides the form; every other item must match it.
	switch first := bytes.TrimSpace(items[0]); {
	case len(first) > 0 && first[0] == '"':
		inputs := make([]embeddingInput, len(items))
		for i, item := range items {
			var s string
			if !isJSONString(item) || json.Unmarshal(item, &s) != nil {
				return nil, invalid("Invalid 'input[%d]': expected a string, like the other items.", i)
			}
			if s == "" {
				return nil, invalid("Invalid 'input[%d]': empty string. Expected a non-empty string.", i)
			}
			inputs[i].text = s
		}
		return inputs, nil
	case len(first) > 0 && first[0] == '[':
		inputs := make([]embeddingInput, len(items))
		for i, item := range items {
			ids, ok := tokenIDs(item)
			if !ok {
				return nil, invalid("Invalid 'input[%d]': expected an array of token ids (non-negative integers), like the other items.", i)
			}
			if len(ids) == 0 {
				return nil, invalid("Invalid 'input[%d]': empty array. Expected an array with minimum length 1, but got an empty array instead.", i)
			}
			inputs[i].tokens = ids
		}
		return inputs, nil
	default:
		ids, ok := tokenIDs(raw)
		if !ok {
			return nil, invalid("Invalid 'input': expected an array of strings, of token ids (non-negative integers), or of arrays of token ids.")
		}
		return []embeddingInput{{tokens: ids}}, nil
	}
}

func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

// tokenIDs decodes a JSON array of non-negative integers (not numeric
// strings, not floats). A non-nil empty slice is returned for [].
func tokenIDs(raw json.RawMessage) ([]int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	ids := make([]int64, len(items))
	for i, item := range items {
		id, err := strconv.ParseInt(string(bytes.TrimSpace(item)), 10, 64)
		if err != nil || id < 0 {
			return nil, false
		}
		ids[i] = id
	}
	return ids, true
}

// Wire types of the embedding list.

type embeddingList struct {
	Object string           `json:"object"`
	Data   []embeddingDatum `json:"data"`
	Model  string           `json:"model"`
	Usage  embeddingUsage   `json:"usage"`
}

type embeddingDatum struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embeddings answers a checked, authorized embeddings request.
func (h *openAI) embeddings(w http.ResponseWriter, body []byte) {
	req, aerr := parseEmbeddingRequest(body)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	out := embeddingList{
		Object: "list",
		Data:   make([]embeddingDatum, len(req.inputs)),
		Model:  req.Model,
	}
	for i := range req.inputs {
		in := &req.inputs[i]
		vec := geminiVector(in.key(), req.dims)
		var emb any = vec
		if req.base64 {
			emb = encodeFloat32s(vec)
		}
		out.Data[i] = embeddingDatum{Object: "embedding", Index: i, Embedding: emb}
		out.Usage.PromptTokens += in.promptTokens()
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens

	b, err := json.Marshal(out)
	if err != nil { // cannot happen: finite floats and strings
		panic(err)
	}
	sum := sha256.Sum256(body)
	w.Header().Set("x-request-id", "req_"+hex.EncodeToString(sum[:12]))
	w.Header().Set("content-type", "application/json")
	w.Header().Set("content-length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// encodeFloat32s is OpenAI's base64 encoding of a vector: standard base64 of
// its little-endian float32 values.
func encodeFloat32s(v []float32) string {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(buf)
}
