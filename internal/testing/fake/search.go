package fake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
)

// Brave Search API wire format, the search vendor behind the Responses
// web_search tool.
const (
	// BraveSearchPath is the web search endpoint.
	BraveSearchPath = "/res/v1/web/search"
	// BraveTokenHeader carries the API key.
	BraveTokenHeader = "X-Subscription-Token"
	// braveMaxCount is Brave's limit on count (and its default).
	braveMaxCount = 20
)

// NewBraveSearch returns a fake of the Brave Search API's web search:
// GET /res/v1/web/search?q=<query>&count=<n> with the key in
// X-Subscription-Token (checked against opts.APIKey when set), answering
// {"type":"search","query":{...},"web":{"type":"search","results":[...]}}.
//
// Results are deterministic and derived only from the query: result i
// (from 1) has the URL https://result<i>.example.com/<slug>, where slug is
// the query's words in lower case joined by "-" (or a hash of the query
// when it has no letters or digits), the title "<query> - result <i>" and
// a description naming both. count (1-20, default 20) results are
// returned. Faults (opts.Fault, x-fake-status, x-fake-delay-ms) apply as
// for the other fakes, with Brave's error body.
func NewBraveSearch(opts Options) http.Handler {
	return &braveSearch{opts: opts}
}

type braveSearch struct {
	opts Options
}

// BraveResult is one web result as Brave renders it.
type BraveResult struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	URL         string `json:"url"`
	Description string `json:"description"`
}

func (h *braveSearch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, ferr := parseFault(h.opts.Fault, r)
	if sleep(r.Context(), h.opts.ServiceTime+f.delay) != nil {
		return
	}
	switch {
	case ferr != nil:
		braveError(w, http.StatusBadRequest, "VALIDATION", ferr.Message)
		return
	case r.URL.Path != BraveSearchPath:
		braveError(w, http.StatusNotFound, "RESOURCE_NOT_FOUND", "Resource not found: "+r.URL.Path)
		return
	case r.Method != http.MethodGet:
		w.Header().Set("allow", http.MethodGet)
		braveError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "Use GET.")
		return
	case h.opts.APIKey != "" && r.Header.Get(BraveTokenHeader) != h.opts.APIKey:
		braveError(w, http.StatusUnauthorized, "SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid.")
		return
	case f.status != 0:
		braveError(w, f.status, "FAKE_FAULT", "Injected fault: status "+strconv.Itoa(f.status)+".")
		return
	}
	q := r.URL.Query()
	query := strings.TrimSpace(q.Get("q"))
	if query == "" {
		braveError(w, http.StatusUnprocessableEntity, "VALIDATION", "Unable to validate request parameter(s): q is required.")
		return
	}
	count := braveMaxCount
	if s := q.Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > braveMaxCount {
			braveError(w, http.StatusUnprocessableEntity, "VALIDATION",
				fmt.Sprintf("Unable to validate request parameter(s): count must be an integer from 1 to %d.", braveMaxCount))
			return
		}
		count = n
	}
	body := struct {
		Type  string `json:"type"`
		Query struct {
			Original             string `json:"original"`
			MoreResultsAvailable bool   `json:"more_results_available"`
		} `json:"query"`
		Web struct {
			Type    string        `json:"type"`
			Results []BraveResult `json:"results"`
		} `json:"web"`
	}{Type: "search"}
	body.Query.Original = query
	body.Web.Type = "search"
	body.Web.Results = BraveResults(query, count)
	b, err := json.Marshal(body)
	if err != nil { // cannot happen: plain structs
		panic(err)
	}
	w.Header().Set("content-type", "application/json")
	_, _ = w.Write(b)
}

// BraveResults returns the fake's results for query, as NewBraveSearch
// serves them, so tests can predict them.
func BraveResults(query string, count int) []BraveResult {
	slug := searchSlug(query)
	out := make([]BraveResult, count)
	for i := range out {
		n := strconv.Itoa(i + 1)
		out[i] = BraveResult{
			Type:        "search_result",
			Title:       query + " - result " + n,
			URL:         "https://result" + n + ".example.com/" + slug,
			Description: "Fake search result " + n + " for \u201c" + query + "\u201d.",
		}
	}
	return out
}

func searchSlug(query string) string {
	words := strings.FieldsFunc(strings.ToLower(query), func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)))
	})
	if len(words) == 0 {
		sum := sha256.Sum256([]byte(query))
		return hex.EncodeToString(sum[:6])
	}
	return strings.Join(words, "-")
}

// braveError writes Brave's error shape.
func braveError(w http.ResponseWriter, status int, code, detail string) {
	b, err := json.Marshal(map[string]any{
		"type": "ErrorResponse",
		"error": map[string]any{
			"id": "fake-" + strconv.Itoa(status), "status": status, "code": code, "detail": detail,
		},
	})
	if err != nil { // cannot happen
		panic(err)
	}
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
