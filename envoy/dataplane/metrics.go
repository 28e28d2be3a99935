package dataplane

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/metrics"
)

// observe records the finished request in the request metrics, from the
// same outcome and metadata as the access log line (never content).
func (s *requestState) observe() {
	m := s.d.opts.Metrics
	if m == nil {
		return
	}
	r := metrics.Request{Status: s.status, Duration: s.end.Sub(s.start), Attempts: s.attempts, Upstream: -1, Stream: s.eventStream}
	if s.attempts > 0 {
		r.Upstream = time.Duration(s.upstreamWait.Load())
	}
	if !s.headersAt.IsZero() {
		r.TimeToFirstByte = s.headersAt.Sub(s.start)
	}
	md := s.meta.get(catalog.MetadataNamespace).GetFields()
	r.Model = md["model"].GetStringValue()
	if r.Model != "" {
		r.Operation = operationName(s.path)
	} else {
		// Not a model request: the path family keeps the label's values
		// few (/v1/files, not /v1/files/file-…).
		r.Model = pathFamily(s.path)
	}
	r.Provider = md["provider"].GetStringValue()
	r.Origin = md["origin"].GetStringValue()
	r.PromptTokens = wholeNumber(md["prompt_tokens"])
	r.CompletionTokens = wholeNumber(md["completion_tokens"])
	r.Cached = wholeNumber(md["cached_tokens"])
	m.Observe(r)
}

// operationName is the GenAI semantic conventions' gen_ai.operation.name
// of a model request's API path.
func operationName(p string) string {
	switch {
	case strings.HasPrefix(p, "/v1/chat/completions"), strings.HasPrefix(p, "/v1/responses"), strings.HasPrefix(p, "/v1/messages"):
		return "chat"
	case strings.HasPrefix(p, "/v1/embeddings"):
		return "embeddings"
	case strings.HasPrefix(p, "/v1/completions"):
		return "text_completion"
	}
	return "chat"
}

// pathFamily is /v1/<resource> of an API path, or "other".
func pathFamily(p string) string {
	rest, ok := strings.CutPrefix(p, "/v1/")
	if !ok {
		return "other"
	}
	resource, _, _ := strings.Cut(rest, "/")
	for _, f := range pathFamilies {
		if f[len("/v1/"):] == resource {
			return f // a constant: no string built per request
		}
	}
	return "other"
}

// pathFamilies are the API path families metrics name.
var pathFamilies = [...]string{"/v1/chat", "/v1/embeddings", "/v1/models", "/v1/files", "/v1/batches", "/v1/responses", "/v1/conversations", "/v1/vector_stores"}

func wholeNumber(v *structpb.Value) int64 {
	if v == nil {
		return 0
	}
	return int64(v.GetNumberValue())
}
