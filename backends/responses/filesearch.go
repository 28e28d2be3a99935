package responses

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// The file_search tool runs the way web_search does: the model is offered
// a function (file_search), the service runs the model's calls to it
// against the owner's vector stores (FileSearcher) and feeds the passages
// found back as the call's tool message, and the client sees
// file_search_call items and events, never the function call. The answer
// that follows gets a file_citation annotation per file it names (see
// fileCitations).

// FileSearcher searches an owner's vector stores; *vectorstores.Service
// implements it. Both methods return an error matching
// vectorstores.ErrNotFound (a *vectorstores.NotFoundError naming it) for a
// store that is not the owner's.
type FileSearcher interface {
	CheckStores(ctx context.Context, owner string, storeIDs []string) error
	Search(ctx context.Context, owner string, storeIDs []string, query string, n int) ([]vectorstores.Result, error)
}

// fileSearchFunction is the function offered in place of file_search.
const fileSearchFunction = "file_search"

// fileSearchDefinition is its chat completions tool definition.
const fileSearchDefinition = `{"type":"function","function":{"name":"file_search",` +
	`"description":"Search the files the user provided. Returns the most relevant passages, each with the name of its file. ` +
	`Use it for questions about the files' content; name the files of the passages you use.",` +
	`"parameters":{"type":"object","properties":{"query":{"type":"string","description":"What to search the files for."}},` +
	`"required":["query"],"additionalProperties":false}}}`

// Bounds of a file_search tool: OpenAI's for max_num_results; the number of
// stores is this gateway's (each store is a scan).
const (
	maxFileSearchStores      = 10
	defaultFileSearchResults = 10
)

// fileSearchTool is the request's file_search tool.
type fileSearchTool struct {
	param     string // tools[i], for errors about its stores
	storeIDs  []string
	max       int
	threshold float64
	// invalid is what is wrong with the tool's fields, reported by
	// checkFileSearch after "not available", which a client of a gateway
	// without vector stores needs to hear first.
	invalid *apierror.Error
}

// parseFileSearch reads a file_search tool. Attribute filters and hybrid
// search weights are refused rather than ignored; the ranker is accepted
// whatever it names (this gateway does not re-rank).
func (req *createRequest) parseFileSearch(param string, t gjson.Result) *apierror.Error {
	if req.fileSearch != nil {
		return apierror.InvalidParam(param+".type", "Duplicate tool 'file_search' in tools.")
	}
	for _, f := range req.fnTools {
		if f.name == fileSearchFunction {
			return apierror.InvalidParam("tools", "The function name '%s' is reserved for the file search tool.", fileSearchFunction)
		}
	}
	fs := &fileSearchTool{param: param, max: defaultFileSearchResults}
	fs.invalid = fs.parse(param, t)
	req.fileSearch = fs
	return nil
}

func (fs *fileSearchTool) parse(param string, t gjson.Result) *apierror.Error {
	ids := t.Get("vector_store_ids")
	switch {
	case !ids.Exists() || ids.Type == gjson.Null:
		return apierror.MissingParam(param + ".vector_store_ids")
	case !ids.IsArray():
		return typeError(param+".vector_store_ids", "an array", ids)
	}
	seen := map[string]bool{}
	for i, id := range ids.Array() {
		if id.Type != gjson.String || id.Str == "" {
			return typeError(fmt.Sprintf("%s.vector_store_ids[%d]", param, i), "a vector store id", id)
		}
		if !seen[id.Str] {
			seen[id.Str] = true
			fs.storeIDs = append(fs.storeIDs, id.Str)
		}
	}
	switch {
	case len(fs.storeIDs) == 0:
		return apierror.InvalidParam(param+".vector_store_ids", "Invalid '%s.vector_store_ids': empty array. Expected at least one vector store id.", param)
	case len(fs.storeIDs) > maxFileSearchStores:
		return apierror.InvalidParam(param+".vector_store_ids", "Invalid '%s.vector_store_ids': at most %d vector stores.", param, maxFileSearchStores)
	}
	if v := t.Get("max_num_results"); v.Exists() && v.Type != gjson.Null {
		n, aerr := integer(param+".max_num_results", v)
		if aerr != nil {
			return aerr
		}
		if n < 1 || n > vectorstores.MaxResults {
			return apierror.InvalidParam(param+".max_num_results", "Invalid '%s.max_num_results': expected a value between 1 and %d, but got %d instead.", param, vectorstores.MaxResults, n)
		}
		fs.max = int(n)
	}
	if v := t.Get("filters"); v.Exists() && v.Type != gjson.Null {
		return apierror.InvalidParam(param+".filters", "Attribute filters of the file_search tool are not supported on this gateway.")
	}
	if ro := t.Get("ranking_options"); ro.Exists() && ro.Type != gjson.Null {
		if !ro.IsObject() {
			return typeError(param+".ranking_options", "an object", ro)
		}
		if h := ro.Get("hybrid_search"); h.Exists() && h.Type != gjson.Null {
			return apierror.InvalidParam(param+".ranking_options.hybrid_search", "Hybrid search weights are not supported on this gateway.")
		}
		if th := ro.Get("score_threshold"); th.Exists() && th.Type != gjson.Null {
			if th.Type != gjson.Number || th.Num < 0 || th.Num > 1 {
				return apierror.InvalidParam(param+".ranking_options.score_threshold", "Invalid '%s.ranking_options.score_threshold': expected a number between 0 and 1.", param)
			}
			fs.threshold = th.Num
		}
	}
	return nil
}

// checkFileSearch refuses a request with file_search when this gateway has
// no vector stores, or when a store named is not the owner's.
func (s *Service) checkFileSearch(ctx context.Context, owner string, req *createRequest) *apierror.Error {
	fs := req.fileSearch
	if fs == nil {
		return nil
	}
	if s.files == nil {
		return apierror.InvalidParam("tools", "The tool type 'file_search' is not available on this gateway.")
	}
	if fs.invalid != nil {
		return fs.invalid
	}
	err := s.files.CheckStores(ctx, owner, fs.storeIDs)
	if nf, ok := errors.AsType[*vectorstores.NotFoundError](err); ok {
		return apierror.InvalidParam(fs.param+".vector_store_ids", "Vector store '%s' not found.", nf.ID)
	}
	if err != nil {
		s.log.Error("responses: check vector stores failed", "err", err)
		return apierror.Server(http.StatusInternalServerError, "internal_error", "The server had an error while processing your request.")
	}
	return nil
}

// fileSearchOffer says whether step offers the model the file_search
// function: under the same bounds as the other built-in tools.
func (r *run) fileSearchOffer(step int) bool {
	return r.req.fileSearch != nil && step < r.s.maxSteps && r.toolBudget()
}

// isFileSearchCall says whether a model's call to name is the service's to
// run.
func (r *run) isFileSearchCall(name string) bool {
	return r.req.fileSearch != nil && name == fileSearchFunction
}

// runFileSearch runs one file_search call of the model and adds the
// passages found to the conversation. A failed search is reported to the
// model, which then answers without it, rather than failing the response.
func (r *run) runFileSearch(ctx context.Context, c *callState) error {
	fs := r.req.fileSearch
	args := c.args.String()
	query := gjson.Get(args, "query").Str
	if !gjson.Valid(args) {
		query = args // a model that sent the query bare
	}
	query = strings.TrimSpace(query)
	id := r.s.newID("fs_")
	index := len(r.obj.Output)
	ref := func(d []byte) []byte { return appendItemRef(d, id, index) }
	r.emitItem("response.output_item.added", index, fileSearchItem(id, "in_progress", query, nil, false))
	r.emit("response.file_search_call.in_progress", ref)
	r.emit("response.file_search_call.searching", ref)

	var (
		results []vectorstores.Result
		err     error
	)
	if query == "" {
		err = errors.New("responses: file search without a query")
	} else {
		results, err = r.s.files.Search(ctx, r.owner, fs.storeIDs, query, fs.max)
	}
	r.searches++ // every built-in tool call counts (max_tool_calls, tool_choice)
	status, content := "completed", ""
	if err != nil {
		if ctx.Err() != nil {
			return errClientGone
		}
		r.s.log.Warn("responses: file search failed", "response", r.obj.ID, "item", id, "err", err)
		status = "failed"
		content = "The file search failed. Answer without it, and say that searching the files was not possible."
		results = nil
	} else {
		kept := results[:0]
		for _, res := range results {
			if res.Score >= fs.threshold {
				kept = append(kept, res)
			}
		}
		results = kept
		r.emit("response.file_search_call.completed", ref)
		content = formatFileResults(query, results)
		r.fileResults = append(r.fileResults, results...)
	}
	item := fileSearchItem(id, status, query, results, r.req.includeFileResults)
	r.emitItem("response.output_item.done", index, item)
	r.obj.Output = append(r.obj.Output, item)
	r.conv.addToolResult(c.callID, content)
	return nil
}

// fileSearchItem renders a file_search_call item. Its results are listed
// only when the request included file_search_call.results, as OpenAI's
// are; otherwise null.
func fileSearchItem(id, status, query string, results []vectorstores.Result, withResults bool) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"file_search_call","status":"`...)
	b = append(b, status...)
	b = append(b, `","queries":[`...)
	if query != "" {
		b = appendString(b, query)
	}
	b = append(b, `],"results":`...)
	if !withResults || status == "in_progress" {
		return append(b, `null}`...)
	}
	b = append(b, '[')
	for i, res := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"file_id":`...)
		b = appendString(b, res.FileID)
		b = append(b, `,"filename":`...)
		b = appendString(b, res.Filename)
		b = append(b, `,"score":`...)
		b = strconv.AppendFloat(b, res.Score, 'g', -1, 64)
		b = append(b, `,"text":`...)
		b = appendString(b, res.Text)
		b = append(b, `,"attributes":`...)
		if res.Attributes != nil {
			b = append(b, res.Attributes...)
		} else {
			b = append(b, `null`...)
		}
		b = append(b, '}')
	}
	return append(b, `]}`...)
}

// formatFileResults is the tool message the model reads after a file
// search.
func formatFileResults(query string, results []vectorstores.Result) string {
	var sb strings.Builder
	if len(results) == 0 {
		fmt.Fprintf(&sb, "No passages of the files match %q.", query)
		return sb.String()
	}
	fmt.Fprintf(&sb, "File search results for %q:", query)
	for i, res := range results {
		fmt.Fprintf(&sb, "\n[%d] File: %s (score %.2f)\n%s", i+1, res.Filename, res.Score, res.Text)
	}
	return sb.String()
}

// fileCitations returns a file_citation for each file of results the text
// names, at the code point just after its first mention (where a citation
// marker would go). When the text names none of them, each file the model
// was given is cited at the end of the text, so a client can still show
// its sources (as citations does for web results).
func fileCitations(text string, results []vectorstores.Result) []annotation {
	var anns []annotation
	seen := map[string]bool{}
	for _, res := range results {
		if seen[res.FileID] {
			continue
		}
		seen[res.FileID] = true
		if i := strings.Index(text, res.Filename); res.Filename != "" && i >= 0 {
			at := utf8.RuneCountInString(text[:i+len(res.Filename)])
			anns = append(anns, annotation{FileID: res.FileID, Filename: res.Filename, Start: at, End: at})
		}
	}
	if len(anns) > 0 {
		sortAnnotations(anns)
		return anns
	}
	n := utf8.RuneCountInString(text)
	clear(seen)
	for _, res := range results {
		if !seen[res.FileID] {
			seen[res.FileID] = true
			anns = append(anns, annotation{FileID: res.FileID, Filename: res.Filename, Start: n, End: n})
		}
	}
	return anns
}

// appendFileCitation renders a file_citation annotation.
func appendFileCitation(dst []byte, a annotation) []byte {
	dst = append(dst, `{"type":"file_citation","file_id":`...)
	dst = appendString(dst, a.FileID)
	dst = append(dst, `,"filename":`...)
	dst = appendString(dst, a.Filename)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(a.Start), 10)
	return append(dst, '}')
}
