package gemini

import (
	"net/url"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/jsonquote"
)

// Header is one request header to set on the upstream request.
type Header struct{ Name, Value string }

// ChatPath is the path, relative to the provider base URL's path, of a chat
// request to upstreamModel: ":generateContent", or for a stream
// ":streamGenerateContent?alt=sse" (without alt=sse Gemini streams one JSON
// array instead of server-sent events). A model given with its collection
// ("models/x", "tunedModels/x") is used as is; a bare id goes under models/.
func ChatPath(upstreamModel string, stream bool) string {
	if stream {
		return "/v1beta/" + resource(upstreamModel) + ":streamGenerateContent?alt=sse"
	}
	return "/v1beta/" + resource(upstreamModel) + ":generateContent"
}

// EmbedPath is the path of an embeddings request to upstreamModel. It is
// always the batch method, so that one OpenAI request maps to one upstream
// request whatever its number of inputs.
func EmbedPath(upstreamModel string) string {
	return "/v1beta/" + resource(upstreamModel) + ":batchEmbedContents"
}

// Headers are the headers of every upstream request. The key goes in
// x-goog-api-key rather than the key query parameter so that it never
// appears in access logs of URLs.
func Headers(credential string) []Header {
	return []Header{
		{Name: "x-goog-api-key", Value: credential},
		{Name: "content-type", Value: "application/json"},
	}
}

// resource is the model's resource name, each segment path-escaped so a
// misconfigured model id cannot smuggle a query or another path in.
func resource(model string) string {
	coll, id, ok := strings.Cut(model, "/")
	if !ok {
		return "models/" + url.PathEscape(model)
	}
	return url.PathEscape(coll) + "/" + url.PathEscape(id)
}

// inner is the text between the quotes of a JSON string literal, still
// escaped; it can be copied between quotes into other JSON as is.
func inner(raw string) string {
	if len(raw) < 2 {
		return ""
	}
	return raw[1 : len(raw)-1]
}

// appendString appends s as a JSON string literal (jsonquote.Append).
func appendString(dst []byte, s string) []byte { return jsonquote.Append(dst, s) }

// appendCompactString appends the JSON text raw, with the whitespace between
// its tokens removed, as a JSON string literal: Gemini sends function
// arguments as an object, OpenAI as a string holding one, conventionally
// compact. raw must be valid JSON.
func appendCompactString(dst []byte, raw string) []byte {
	dst = append(dst, '"')
	inStr, esc := false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		} else {
			switch c {
			case ' ', '\t', '\n', '\r':
				continue
			case '"':
				inStr = true
			}
		}
		if c == '"' || c == '\\' || c < 0x20 {
			dst = jsonquote.AppendEscape(dst, c)
			continue
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}
