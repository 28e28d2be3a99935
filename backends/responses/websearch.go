package responses

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// webSearchFunction is the function the service offers the model in place
// of the web_search tool; the model's calls to it are run by the service,
// never returned to the client.
const webSearchFunction = "web_search"

// webSearchDefinition is its chat completions tool definition.
const webSearchDefinition = `{"type":"function","function":{"name":"web_search",` +
	`"description":"Search the web. Returns the top results, each with a title, a URL and a snippet. ` +
	`Use it for current events and facts you are not sure of; cite the URLs of the results you use.",` +
	`"parameters":{"type":"object","properties":{"query":{"type":"string","description":"The search query."}},` +
	`"required":["query"],"additionalProperties":false}}}`

// SearchResult is one web search hit.
type SearchResult struct {
	Title, URL, Description string
}

// Searcher runs web searches for the web_search tool. Implementations call
// an external search vendor; Brave is the one this package provides.
type Searcher interface {
	Search(ctx context.Context, query string, count int) ([]SearchResult, error)
}

// Brave is a Searcher using the Brave Search API
// (GET {BaseURL}/res/v1/web/search?q=…&count=…, X-Subscription-Token).
type Brave struct {
	// BaseURL is the API's origin, e.g. https://api.search.brave.com.
	BaseURL string
	APIKey  string
	HTTP    *http.Client
}

// NewBrave returns a Brave searcher for the API at baseURL.
func NewBrave(baseURL, apiKey string) *Brave {
	return &Brave{BaseURL: strings.TrimSuffix(baseURL, "/"), APIKey: apiKey,
		HTTP: &http.Client{Timeout: 15 * time.Second}}
}

// maxSearchBody bounds a search vendor's answer: a page of 20 results is a
// few tens of kilobytes.
const maxSearchBody = 4 << 20

// Search implements Searcher. Brave returns at most 20 results per query.
func (b *Brave) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	count = min(max(count, 1), 20)
	u := b.BaseURL + "/res/v1/web/search?" + url.Values{"q": {query}, "count": {strconv.Itoa(count)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("brave search: %w", err)
	}
	req.Header.Set("accept", "application/json")
	req.Header.Set("x-subscription-token", b.APIKey)
	hc := b.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		// Without the *url.Error: its message holds the URL, and so the
		// query, which must not reach the logs.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("brave search: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSearchBody))
	if err != nil {
		return nil, fmt.Errorf("brave search: read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		// The status only: the body may echo the query.
		return nil, fmt.Errorf("brave search: status %d", resp.StatusCode)
	}
	if !gjson.ValidBytes(body) {
		return nil, fmt.Errorf("brave search: invalid JSON answer")
	}
	var out []SearchResult
	gjson.GetBytes(body, "web.results").ForEach(func(_, r gjson.Result) bool {
		if u := r.Get("url").Str; u != "" {
			out = append(out, SearchResult{Title: r.Get("title").Str, URL: u, Description: r.Get("description").Str})
		}
		return len(out) < count
	})
	return out, nil
}

// formatResults is the tool message the model reads after a search.
func formatResults(query string, results []SearchResult) string {
	var sb strings.Builder
	if len(results) == 0 {
		fmt.Fprintf(&sb, "No results for %q.", query)
		return sb.String()
	}
	fmt.Fprintf(&sb, "Search results for %q:", query)
	for i, r := range results {
		fmt.Fprintf(&sb, "\n[%d] %s\nURL: %s\n%s", i+1, r.Title, r.URL, r.Description)
	}
	return sb.String()
}

// citations annotates text with a url_citation for every occurrence of a
// result URL in it. When the text cites none of them, each result the
// model was given is attributed to the whole text, so a client can still
// show its sources.
func citations(text string, results []SearchResult) []annotation {
	var anns []annotation
	seen := map[string]bool{}
	for _, r := range results {
		if seen[r.URL] {
			continue
		}
		seen[r.URL] = true
		for off := 0; ; {
			i := strings.Index(text[off:], r.URL)
			if i < 0 {
				break
			}
			start := off + i
			end := start + len(r.URL)
			anns = append(anns, annotation{URL: r.URL, Title: r.Title,
				Start: utf8.RuneCountInString(text[:start]), End: utf8.RuneCountInString(text[:end])})
			off = end
		}
	}
	if len(anns) > 0 {
		sortAnnotations(anns)
		return anns
	}
	n := utf8.RuneCountInString(text)
	clear(seen)
	for _, r := range results {
		if !seen[r.URL] {
			seen[r.URL] = true
			anns = append(anns, annotation{URL: r.URL, Title: r.Title, Start: 0, End: n})
		}
	}
	return anns
}

// sortAnnotations orders annotations by position (insertion sort: a
// message cites a handful of URLs).
func sortAnnotations(a []annotation) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].Start < a[j-1].Start; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
