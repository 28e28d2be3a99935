package anthropic

// Version is the anthropic-version header value the translation is written
// against: the Messages API wire format it produces and parses.
const Version = "2023-06-01"

// defaultMaxTokens is the max_tokens sent when neither the client nor
// Options.DefaultMaxTokens says otherwise. Anthropic requires the field.
const defaultMaxTokens = 4096

// Options tunes TranslateRequest.
type Options struct {
	// DropUnsupported drops parameters Anthropic cannot honour instead of
	// answering 400 (temperature above 1 is clamped to 1).
	DropUnsupported bool
	// DefaultMaxTokens is sent as max_tokens, which Anthropic requires, when
	// the client sent neither max_tokens nor max_completion_tokens. 0 means
	// 4096.
	DefaultMaxTokens int
	// NoCacheControl turns off the automatic prompt caching breakpoints
	// (see the package documentation); a client's own cache_control on
	// content parts is kept either way.
	NoCacheControl bool
	// CacheMinTokens is the shortest prefix an automatic breakpoint is
	// placed after, estimated at 4 bytes a token. 0 means 1024, Anthropic's
	// minimum for most models (Haiku models need 2048).
	CacheMinTokens int
}

// Prompt caching limits.
const (
	// maxBreakpoints is how many cache_control breakpoints Anthropic
	// accepts in one request.
	maxBreakpoints = 4
	// defaultCacheMinTokens is Options.CacheMinTokens's default.
	defaultCacheMinTokens = 1024
	// bytesPerToken is the token estimate's ratio.
	bytesPerToken = 4
)

// Header is one upstream request header.
type Header struct{ Name, Value string }

// messagesPath is the Messages API endpoint, for streaming or not.
const messagesPath = "/v1/messages"

// Path returns the upstream path, relative to the provider base URL's path.
// Anthropic streams from the same endpoint (with "stream": true in the body),
// so stream does not change it; it is a parameter so callers do not depend on
// that.
func Path(stream bool) string { return messagesPath }

// Headers returns the headers the upstream request needs: the API key, the
// API version the body is written for, and the body's content type.
func Headers(credential string) []Header {
	return []Header{
		{Name: "x-api-key", Value: credential},
		{Name: "anthropic-version", Value: Version},
		{Name: "content-type", Value: "application/json"},
	}
}
