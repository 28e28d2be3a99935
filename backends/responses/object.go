package responses

import (
	"encoding/json"
	"strconv"
)

// responseObject is the Response resource. Fields echo the request the
// way OpenAI does: defaults filled in, nulls where nothing was asked.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	CompletedAt        *int64            `json:"completed_at"`
	Background         bool              `json:"background"`
	Conversation       *conversationRef  `json:"conversation,omitempty"`
	Error              *responseError    `json:"error"`
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	MaxToolCalls       *int64            `json:"max_tool_calls"`
	Model              string            `json:"model"`
	Output             []json.RawMessage `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	Reasoning          json.RawMessage   `json:"reasoning"`
	SafetyIdentifier   *string           `json:"safety_identifier"`
	ServiceTier        string            `json:"service_tier"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               json.RawMessage   `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              json.RawMessage   `json:"tools"`
	TopLogprobs        int               `json:"top_logprobs"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	// Usage is absent until the response is finished.
	Usage    *usage          `json:"usage,omitempty"`
	User     *string         `json:"user,omitempty"`
	Metadata json.RawMessage `json:"metadata"`
}

// conversationRef names the conversation a response belongs to.
type conversationRef struct {
	ID string `json:"id"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type usage struct {
	InputTokens        int64              `json:"input_tokens"`
	InputTokensDetails inputTokensDetails `json:"input_tokens_details"`
	OutputTokens       int64              `json:"output_tokens"`
	OutputDetails      outputDetails      `json:"output_tokens_details"`
	TotalTokens        int64              `json:"total_tokens"`
}

type inputTokensDetails struct {
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

type outputDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// newObject returns the Response for req as it starts: in progress, no
// output.
func newObject(id string, createdAt int64, req *createRequest) *responseObject {
	o := &responseObject{
		ID: id, Object: "response", CreatedAt: createdAt, Status: "in_progress",
		Model:             req.model,
		Output:            []json.RawMessage{},
		ParallelToolCalls: !req.parallelToolCalls.Exists() || req.parallelToolCalls.Bool(),
		Reasoning:         req.reasoning,
		ServiceTier:       "default",
		Store:             req.store,
		Temperature:       1,
		Text:              req.text,
		ToolChoice:        req.choiceEcho,
		Tools:             req.toolsEcho,
		TopP:              1,
		Truncation:        req.truncation,
		Metadata:          req.metadata,
	}
	if req.hasInstr {
		o.Instructions = &req.instructions
	}
	if req.maxOutputTokens > 0 {
		o.MaxOutputTokens = &req.maxOutputTokens
	}
	if req.maxToolCalls > 0 {
		o.MaxToolCalls = &req.maxToolCalls
	}
	if req.previousID != "" {
		o.PreviousResponseID = &req.previousID
	}
	if req.conversation != "" {
		o.Conversation = &conversationRef{ID: req.conversation}
	}
	if req.temperature.Exists() {
		o.Temperature = req.temperature.Num
	}
	if req.topP.Exists() {
		o.TopP = req.topP.Num
	}
	for _, p := range []struct {
		src string
		dst **string
	}{{req.user, &o.User}, {req.promptCacheKey, &o.PromptCacheKey}, {req.safetyIdentifier, &o.SafetyIdentifier}} {
		if p.src != "" {
			s := p.src
			*p.dst = &s
		}
	}
	return o
}

func (o *responseObject) marshal() []byte {
	b, err := json.Marshal(o)
	if err != nil { // cannot happen: raw fields are valid JSON built by this package
		panic(err)
	}
	return b
}

// Output items, rendered by hand: they are built once per item and the
// text can be long, so no intermediate structs.

// annotation is a url_citation on output text; indexes count Unicode code
// points, as OpenAI's do.
type annotation struct {
	URL, Title string
	Start, End int
	// FileID set: a file_citation of Filename at index Start
	// (filesearch.go) instead.
	FileID, Filename string
}

func appendAnnotations(dst []byte, anns []annotation) []byte {
	dst = append(dst, '[')
	for i, a := range anns {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendAnnotation(dst, a)
	}
	return append(dst, ']')
}

func appendAnnotation(dst []byte, a annotation) []byte {
	if a.FileID != "" {
		return appendFileCitation(dst, a)
	}
	dst = append(dst, `{"type":"url_citation","url":`...)
	dst = appendString(dst, a.URL)
	dst = append(dst, `,"title":`...)
	dst = appendString(dst, a.Title)
	dst = append(dst, `,"start_index":`...)
	dst = strconv.AppendInt(dst, int64(a.Start), 10)
	dst = append(dst, `,"end_index":`...)
	dst = strconv.AppendInt(dst, int64(a.End), 10)
	return append(dst, '}')
}

func appendTextContent(dst []byte, text string, anns []annotation) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = appendString(dst, text)
	dst = append(dst, `,"annotations":`...)
	dst = appendAnnotations(dst, anns)
	return append(dst, `,"logprobs":[]}`...)
}

func appendRefusalContent(dst []byte, refusal string) []byte {
	dst = append(dst, `{"type":"refusal","refusal":`...)
	dst = appendString(dst, refusal)
	return append(dst, '}')
}

// messageItem renders an assistant output message; parts are rendered
// content parts.
func messageItem(id, status string, parts ...[]byte) []byte {
	b := make([]byte, 0, 96)
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"message","status":"`...)
	b = append(b, status...)
	b = append(b, `","content":[`...)
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p...)
	}
	return append(b, `],"role":"assistant"}`...)
}

func functionCallItem(id, status, callID, name, arguments string) []byte {
	b := make([]byte, 0, 96+len(arguments))
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"function_call","status":"`...)
	b = append(b, status...)
	b = append(b, `","arguments":`...)
	b = appendString(b, arguments)
	b = append(b, `,"call_id":`...)
	b = appendString(b, callID)
	b = append(b, `,"name":`...)
	b = appendString(b, name)
	return append(b, '}')
}

func webSearchItem(id, status, query string, sources []SearchResult, withSources bool) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"web_search_call","status":"`...)
	b = append(b, status...)
	b = append(b, `","action":{"type":"search","query":`...)
	b = appendString(b, query)
	if withSources {
		b = append(b, `,"sources":[`...)
		for i, s := range sources {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"url","url":`...)
			b = appendString(b, s.URL)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, `}}`...)
}
