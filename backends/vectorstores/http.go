package vectorstores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/metadata"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

const (
	basePath = "/v1/vector_stores"
	// maxBody bounds a request body: 500 file ids and metadata are a few
	// tens of kilobytes.
	maxBody = 1 << 20
	// maxNameBytes bounds a store's name and description.
	maxNameBytes = 512
	// List page sizes (OpenAI's).
	defaultListLimit = 20
	maxListLimit     = 100
)

// Handler serves /v1/vector_stores and its subpaths for the caller that
// caller.Require put in the request context.
func (s *Service) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Service) serveHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := caller.Of(w, r)
	if !ok {
		s.log.Error("vectorstores: request without a caller; is the handler behind caller.Require?", "path", r.URL.Path)
		return
	}
	owner := c.Owner
	rest, ok := strings.CutPrefix(r.URL.Path, basePath)
	if !ok || (rest != "" && rest[0] != '/') {
		apierror.NotFound(r.URL.Path).Write(w)
		return
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	switch {
	case len(parts) == 0:
		switch r.Method {
		case http.MethodGet:
			s.serveList(w, r, owner)
		case http.MethodPost:
			s.serveCreate(w, r, owner)
		default:
			apierror.WriteMethodNotAllowed(w, r, "GET, POST")
		}
	case len(parts) == 1:
		switch r.Method {
		case http.MethodGet:
			s.serveGet(w, r, owner, parts[0])
		case http.MethodPost:
			s.serveModify(w, r, owner, parts[0])
		case http.MethodDelete:
			s.serveDelete(w, r, owner, parts[0])
		default:
			apierror.WriteMethodNotAllowed(w, r, "GET, POST, DELETE")
		}
	case len(parts) == 2 && parts[1] == "search":
		if r.Method != http.MethodPost {
			apierror.WriteMethodNotAllowed(w, r, "POST")
			return
		}
		s.serveSearch(w, r, owner, parts[0])
	case len(parts) == 2 && parts[1] == "files":
		switch r.Method {
		case http.MethodGet:
			s.serveListFiles(w, r, owner, parts[0], "")
		case http.MethodPost:
			s.serveAttach(w, r, owner, parts[0])
		default:
			apierror.WriteMethodNotAllowed(w, r, "GET, POST")
		}
	case len(parts) == 3 && parts[1] == "files":
		switch r.Method {
		case http.MethodGet:
			s.serveGetFile(w, r, owner, parts[0], parts[2])
		case http.MethodPost:
			s.serveUpdateFile(w, r, owner, parts[0], parts[2])
		case http.MethodDelete:
			s.serveDetach(w, r, owner, parts[0], parts[2])
		default:
			apierror.WriteMethodNotAllowed(w, r, "GET, POST, DELETE")
		}
	case len(parts) == 2 && parts[1] == "file_batches":
		if r.Method != http.MethodPost {
			apierror.WriteMethodNotAllowed(w, r, "POST")
			return
		}
		s.serveCreateBatch(w, r, owner, parts[0])
	case len(parts) >= 3 && parts[1] == "file_batches" && parts[2] == "":
		apierror.NotFound(r.URL.Path).Write(w)
	case len(parts) == 3 && parts[1] == "file_batches":
		if r.Method != http.MethodGet {
			apierror.WriteMethodNotAllowed(w, r, "GET")
			return
		}
		s.serveGetBatch(w, r, owner, parts[0], parts[2])
	case len(parts) == 4 && parts[1] == "file_batches" && parts[3] == "cancel":
		if r.Method != http.MethodPost {
			apierror.WriteMethodNotAllowed(w, r, "POST")
			return
		}
		s.serveCancelBatch(w, r, owner, parts[0], parts[2])
	case len(parts) == 4 && parts[1] == "file_batches" && parts[3] == "files":
		if r.Method != http.MethodGet {
			apierror.WriteMethodNotAllowed(w, r, "GET")
			return
		}
		s.serveListFiles(w, r, owner, parts[0], parts[2])
	default:
		apierror.NotFound(r.URL.Path).Write(w)
	}
}

// apiError maps the package's errors to what the client sees; anything
// unexpected is logged here and becomes a generic 500.
func (s *Service) apiError(err error) *apierror.Error {
	var (
		ae  *apierror.Error
		nf  *NotFoundError
		fnf *FileNotFoundError
		bnf *BatchNotFoundError
		cur *InvalidCursorError
		ee  *embedError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &nf):
		return &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "vector_store_id",
			Message: fmt.Sprintf("No vector store found with id '%s'.", nf.ID)}
	case errors.As(err, &fnf):
		return &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "file_id",
			Message: fmt.Sprintf("No file found with id '%s' in the vector store.", fnf.ID)}
	case errors.As(err, &bnf):
		return &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "batch_id",
			Message: fmt.Sprintf("No file batch found with id '%s' in the vector store.", bnf.ID)}
	case errors.Is(err, ErrBatchDone):
		return &apierror.Error{Status: http.StatusConflict, Code: "invalid_batch_status",
			Message: "Cannot cancel a file batch that is completed: none of its files is in progress."}
	case errors.As(err, &cur):
		return apierror.InvalidParam(cur.Param, "No item with id '%s' in this list.", cur.ID)
	case errors.Is(err, ErrStoreFull):
		return apierror.InvalidParam("file_id", "A vector store may hold at most %d files.", MaxFilesPerStore)
	case errors.As(err, &ee):
		// The owner's own rate limit (429) and refusals about the owner
		// (a revoked key, an allow-list without the embedding model, a
		// model the gateway no longer serves) are theirs to see, with
		// their status; a 5xx is the gateway's problem.
		switch {
		case ee.status == http.StatusTooManyRequests:
			return &apierror.Error{Status: http.StatusTooManyRequests, Type: apierror.TypeRequests, Code: "rate_limit_exceeded",
				Message: "The query could not be embedded: rate limit exceeded. " + ee.message}
		case ee.status >= 400 && ee.status < 500:
			return &apierror.Error{Status: ee.status, Code: "embedding_failed",
				Message: fmt.Sprintf("The query could not be embedded with the vector store's embedding model (status %d): %s", ee.status, ee.message)}
		}
		s.log.Warn("vectorstores: query embedding failed", "status", ee.status)
		return apierror.Server(http.StatusBadGateway, "embedding_failed",
			fmt.Sprintf("The query could not be embedded: the embeddings request failed with status %d.", ee.status))
	}
	s.log.Error("vectorstores: request failed", "err", err)
	return apierror.Server(http.StatusInternalServerError, "internal_error",
		"The server had an error while processing your request.")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// readBody reads a JSON object body.
func readBody(w http.ResponseWriter, r *http.Request) (gjson.Result, *apierror.Error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return gjson.Result{}, apierror.TooLarge(maxBody)
		}
		return gjson.Result{}, apierror.InvalidParam("", "The request body could not be read.")
	}
	if !gjson.ValidBytes(b) {
		return gjson.Result{}, apierror.InvalidJSON()
	}
	root := gjson.ParseBytes(b)
	if !root.IsObject() {
		return gjson.Result{}, apierror.InvalidJSON()
	}
	return root, nil
}

func present(v gjson.Result) bool { return v.Exists() && v.Type != gjson.Null }

func typeError(param, want string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type", Param: param,
		Message: fmt.Sprintf("Invalid type for '%s': expected %s.", param, want)}
}

// Wire objects.

type fileCounts struct {
	InProgress int64 `json:"in_progress"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
	Cancelled  int64 `json:"cancelled"`
	Total      int64 `json:"total"`
}

type expiresAfter struct {
	Anchor string `json:"anchor"`
	Days   int    `json:"days"`
}

type storeObject struct {
	ID           string          `json:"id"`
	Object       string          `json:"object"`
	CreatedAt    int64           `json:"created_at"`
	Name         string          `json:"name"`
	UsageBytes   int64           `json:"usage_bytes"`
	FileCounts   fileCounts      `json:"file_counts"`
	Status       string          `json:"status"`
	ExpiresAfter *expiresAfter   `json:"expires_after,omitempty"`
	ExpiresAt    *int64          `json:"expires_at"`
	LastActiveAt *int64          `json:"last_active_at"`
	Metadata     json.RawMessage `json:"metadata"`
}

func (s *Service) storeObject(ctx context.Context, st StoreRow) (storeObject, error) {
	c, err := s.store.Counts(ctx, st.ID)
	if err != nil {
		return storeObject{}, err
	}
	active := st.LastActiveAt.Unix()
	o := storeObject{ID: st.ID, Object: "vector_store", CreatedAt: st.CreatedAt.Unix(), Name: st.Name,
		UsageBytes: c.UsageBytes, Status: StatusCompleted, LastActiveAt: &active, Metadata: st.Metadata,
		FileCounts: fileCounts{InProgress: c.InProgress, Completed: c.Completed, Failed: c.Failed,
			Cancelled: c.Cancelled, Total: c.Total}}
	if c.InProgress > 0 {
		o.Status = StatusInProgress
	}
	if st.ExpiresDays > 0 {
		o.ExpiresAfter = &expiresAfter{Anchor: "last_active_at", Days: st.ExpiresDays}
		e := st.ExpiresAt.Unix()
		o.ExpiresAt = &e
	}
	return o, nil
}

type lastError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type staticChunking struct {
	MaxChunkSizeTokens int `json:"max_chunk_size_tokens"`
	ChunkOverlapTokens int `json:"chunk_overlap_tokens"`
}

type chunkingObject struct {
	Type   string         `json:"type"`
	Static staticChunking `json:"static"`
}

type fileObject struct {
	ID               string          `json:"id"`
	Object           string          `json:"object"`
	UsageBytes       int64           `json:"usage_bytes"`
	CreatedAt        int64           `json:"created_at"`
	VectorStoreID    string          `json:"vector_store_id"`
	Status           string          `json:"status"`
	LastError        *lastError      `json:"last_error"`
	ChunkingStrategy chunkingObject  `json:"chunking_strategy"`
	Attributes       json.RawMessage `json:"attributes"`
}

func toFileObject(f FileRow) fileObject {
	o := fileObject{ID: f.FileID, Object: "vector_store.file", UsageBytes: f.UsageBytes, CreatedAt: f.CreatedAt.Unix(),
		VectorStoreID: f.StoreID, Status: f.Status, Attributes: f.Attributes,
		// OpenAI reports auto as the static sizes it stands for.
		ChunkingStrategy: chunkingObject{Type: "static", Static: staticChunking{f.ChunkTokens, f.Overlap}}}
	if f.ErrCode != "" {
		o.LastError = &lastError{Code: f.ErrCode, Message: f.ErrMessage}
	}
	return o
}

type listObject[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	FirstID string `json:"first_id"`
	LastID  string `json:"last_id"`
	HasMore bool   `json:"has_more"`
}

type deletedObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// Request fields.

// parseAttributes reads a vector store file's attributes: metadata's limits
// (package metadata), but values may also be numbers or booleans. nil when
// absent.
func parseAttributes(v gjson.Result) ([]byte, *apierror.Error) {
	return parseAttributesAt(v, "attributes")
}

// parseAttributesAt is parseAttributes of the field param.
func parseAttributesAt(v gjson.Result, param string) ([]byte, *apierror.Error) {
	if !present(v) {
		return nil, nil
	}
	if !v.IsObject() {
		return nil, typeError(param, "an object")
	}
	n := 0
	var aerr *apierror.Error
	v.ForEach(func(k, val gjson.Result) bool {
		n++
		switch {
		case n > metadata.MaxPairs:
			aerr = apierror.InvalidParam(param, "Invalid '%s': at most %d pairs.", param, metadata.MaxPairs)
		case utf8.RuneCountInString(k.Str) > metadata.MaxKeyLen:
			aerr = apierror.InvalidParam(param, "Invalid '%s': keys are at most %d characters.", param, metadata.MaxKeyLen)
		case val.Type == gjson.String && utf8.RuneCountInString(val.Str) > metadata.MaxValueLen:
			aerr = apierror.InvalidParam(param+"."+k.Str, "Invalid '%s': values are at most %d characters.", param, metadata.MaxValueLen)
		case val.Type != gjson.String && val.Type != gjson.Number && !val.IsBool():
			aerr = typeError(param+"."+k.Str, "a string, a number or a boolean")
		}
		return aerr == nil
	})
	if aerr != nil {
		return nil, aerr
	}
	return []byte(v.Raw), nil
}

// parseChunking reads chunking_strategy: auto (absent) or static.
func parseChunking(v gjson.Result) (tokens, overlap int, aerr *apierror.Error) {
	return parseChunkingAt(v, "chunking_strategy")
}

// parseChunkingAt is parseChunking of the field param.
func parseChunkingAt(v gjson.Result, param string) (tokens, overlap int, aerr *apierror.Error) {
	if !present(v) {
		return AutoChunkTokens, AutoOverlapTokens, nil
	}
	if !v.IsObject() {
		return 0, 0, typeError(param, "an object")
	}
	switch t := v.Get("type").Str; t {
	case "auto":
		return AutoChunkTokens, AutoOverlapTokens, nil
	case "static":
	case "":
		return 0, 0, apierror.MissingParam(param + ".type")
	default:
		return 0, 0, apierror.InvalidParam(param+".type", "Invalid value: '%s'. Supported values are: 'auto' and 'static'.", t)
	}
	st := v.Get("static")
	if !st.IsObject() {
		return 0, 0, apierror.MissingParam(param + ".static")
	}
	size, over := st.Get("max_chunk_size_tokens"), st.Get("chunk_overlap_tokens")
	if size.Type != gjson.Number || size.Num != float64(int(size.Num)) {
		return 0, 0, typeError(param+".static.max_chunk_size_tokens", "an integer")
	}
	if over.Type != gjson.Number || over.Num != float64(int(over.Num)) {
		return 0, 0, typeError(param+".static.chunk_overlap_tokens", "an integer")
	}
	tokens, overlap = int(size.Num), int(over.Num)
	if tokens < MinChunkTokens || tokens > MaxChunkTokens {
		return 0, 0, apierror.InvalidParam(param+".static.max_chunk_size_tokens",
			"max_chunk_size_tokens must be between %d and %d.", MinChunkTokens, MaxChunkTokens)
	}
	if overlap < 0 || overlap > tokens/2 {
		return 0, 0, apierror.InvalidParam(param+".static.chunk_overlap_tokens",
			"chunk_overlap_tokens must be between 0 and half of max_chunk_size_tokens (%d).", tokens/2)
	}
	return tokens, overlap, nil
}

// parseExpiresAfter reads expires_after: days, or 0 for null (modify
// removes it).
func parseExpiresAfter(v gjson.Result) (int, *apierror.Error) {
	const param = "expires_after"
	if !present(v) {
		return 0, nil
	}
	if !v.IsObject() {
		return 0, typeError(param, "an object")
	}
	anchor, days := v.Get("anchor"), v.Get("days")
	if !present(anchor) {
		return 0, apierror.MissingParam(param + ".anchor")
	}
	if anchor.Str != "last_active_at" {
		return 0, apierror.InvalidParam(param+".anchor", "Invalid value: '%s'. The only supported anchor is 'last_active_at'.", anchor.String())
	}
	if !present(days) {
		return 0, apierror.MissingParam(param + ".days")
	}
	if days.Type != gjson.Number || days.Num != float64(int(days.Num)) || days.Num < MinExpiresDays || days.Num > MaxExpiresDays {
		return 0, apierror.InvalidParam(param+".days", "expires_after.days must be an integer between %d and %d.", MinExpiresDays, MaxExpiresDays)
	}
	return int(days.Num), nil
}

func parseName(v gjson.Result, param string) (string, *apierror.Error) {
	if !present(v) {
		return "", nil
	}
	if v.Type != gjson.String {
		return "", typeError(param, "a string")
	}
	if len(v.Str) > maxNameBytes {
		return "", apierror.InvalidParam(param, "'%s' must be at most %d bytes.", param, maxNameBytes)
	}
	return v.Str, nil
}

// ownerFile checks that owner uploaded file id and returns it; param names
// the field in a 404.
func (s *Service) ownerFile(r *http.Request, owner, id, param string) (files.File, *apierror.Error) {
	f, err := s.files.Get(r.Context(), owner, id)
	if errors.Is(err, files.ErrNotFound) {
		return files.File{}, &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: param,
			Message: "No such File object: " + id}
	}
	if err != nil {
		return files.File{}, s.apiError(err)
	}
	return f, nil
}

// Handlers.

func (s *Service) serveCreate(w http.ResponseWriter, r *http.Request, owner string) {
	root, aerr := readBody(w, r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	name, aerr := parseName(root.Get("name"), "name")
	if aerr != nil {
		aerr.Write(w)
		return
	}
	desc, aerr := parseName(root.Get("description"), "description")
	if aerr != nil {
		aerr.Write(w)
		return
	}
	meta, aerr := metadata.Parse(root.Get("metadata"))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	if meta == nil {
		meta = []byte("{}")
	}
	days, aerr := parseExpiresAfter(root.Get("expires_after"))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	tokens, overlap, aerr := parseChunking(root.Get("chunking_strategy"))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	var ids []string
	if v := root.Get("file_ids"); present(v) {
		if !v.IsArray() {
			typeError("file_ids", "an array of strings").Write(w)
			return
		}
		arr := v.Array()
		if len(arr) > MaxFileIDs {
			apierror.InvalidParam("file_ids", "Invalid 'file_ids': at most %d files per request, got %d.", MaxFileIDs, len(arr)).Write(w)
			return
		}
		seen := map[string]bool{}
		for i, id := range arr {
			if id.Type != gjson.String {
				typeError(fmt.Sprintf("file_ids[%d]", i), "a string").Write(w)
				return
			}
			if !seen[id.Str] {
				seen[id.Str] = true
				ids = append(ids, id.Str)
			}
		}
	}
	now := s.now()
	st := StoreRow{ID: newID(), Owner: owner, Name: name, Description: desc, Metadata: meta,
		CreatedAt: now, LastActiveAt: now, ExpiresDays: days, ExpiresAt: ExpiryOf(now, days)}
	rows := make([]FileRow, 0, len(ids))
	for _, id := range ids {
		f, aerr := s.ownerFile(r, owner, id, "file_ids")
		if aerr != nil {
			aerr.Write(w)
			return
		}
		rows = append(rows, newFile(st.ID, owner, id, f.Filename, tokens, overlap, nil, now))
	}
	if err := s.createStore(r.Context(), st, rows); err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.poke()
	s.log.Info("vectorstores: created", "store", st.ID, "owner", owner, "files", len(rows))
	o, err := s.storeObject(r.Context(), st)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	writeJSON(w, o)
}

func (s *Service) serveGet(w http.ResponseWriter, r *http.Request, owner, id string) {
	st, err := s.getStore(r.Context(), owner, id)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	o, err := s.storeObject(r.Context(), st)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	writeJSON(w, o)
}

func (s *Service) serveModify(w http.ResponseWriter, r *http.Request, owner, id string) {
	root, aerr := readBody(w, r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	var p StorePatch
	if v := root.Get("name"); present(v) {
		name, aerr := parseName(v, "name")
		if aerr != nil {
			aerr.Write(w)
			return
		}
		p.Name = &name
	}
	if p.Metadata, aerr = metadata.Parse(root.Get("metadata")); aerr != nil {
		aerr.Write(w)
		return
	}
	if v := root.Get("expires_after"); v.Exists() {
		p.SetExpiry = true
		if p.ExpiresDays, aerr = parseExpiresAfter(v); aerr != nil {
			aerr.Write(w)
			return
		}
	}
	st, err := s.modifyStore(r.Context(), owner, id, p)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	o, err := s.storeObject(r.Context(), st)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	writeJSON(w, o)
}

func (s *Service) serveDelete(w http.ResponseWriter, r *http.Request, owner, id string) {
	if err := s.deleteStore(r.Context(), owner, id); err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.log.Info("vectorstores: deleted", "store", id, "owner", owner)
	writeJSON(w, deletedObject{ID: id, Object: "vector_store.deleted", Deleted: true})
}

// parseList reads limit, order, after and before.
func parseList(r *http.Request) (ListQuery, *apierror.Error) {
	q := r.URL.Query()
	lq := ListQuery{Limit: defaultListLimit, Desc: true, After: q.Get("after"), Before: q.Get("before")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, apierror.InvalidParam("limit", "limit must be an integer between 1 and %d.", maxListLimit)
		}
		lq.Limit = n
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.Desc = false
	default:
		return lq, apierror.InvalidParam("order", "order must be 'asc' or 'desc'.")
	}
	return lq, nil
}

func (s *Service) serveList(w http.ResponseWriter, r *http.Request, owner string) {
	lq, aerr := parseList(r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	stores, more, err := s.listStores(r.Context(), owner, lq)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	out := listObject[storeObject]{Object: "list", Data: make([]storeObject, 0, len(stores)), HasMore: more}
	for _, st := range stores {
		o, err := s.storeObject(r.Context(), st)
		if err != nil {
			s.apiError(err).Write(w)
			return
		}
		out.Data = append(out.Data, o)
	}
	if len(stores) > 0 {
		out.FirstID, out.LastID = stores[0].ID, stores[len(stores)-1].ID
	}
	writeJSON(w, out)
}

func (s *Service) serveAttach(w http.ResponseWriter, r *http.Request, owner, id string) {
	root, aerr := readBody(w, r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	fid := root.Get("file_id")
	if !present(fid) {
		apierror.MissingParam("file_id").Write(w)
		return
	}
	if fid.Type != gjson.String {
		typeError("file_id", "a string").Write(w)
		return
	}
	tokens, overlap, aerr := parseChunking(root.Get("chunking_strategy"))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	attrs, aerr := parseAttributes(root.Get("attributes"))
	if aerr != nil {
		aerr.Write(w)
		return
	}
	// The store first: a missing store is the 404 to report.
	if _, err := s.getStore(r.Context(), owner, id); err != nil {
		s.apiError(err).Write(w)
		return
	}
	f, aerr := s.ownerFile(r, owner, fid.Str, "file_id")
	if aerr != nil {
		aerr.Write(w)
		return
	}
	rows, err := s.attachFiles(r.Context(), owner, id,
		[]FileRow{newFile(id, owner, f.ID, f.Filename, tokens, overlap, attrs, s.now())})
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.log.Info("vectorstores: file attached", "store", id, "file", f.ID, "owner", owner)
	setPollAfter(w, rows[0].Status)
	writeJSON(w, toFileObject(rows[0]))
}

// serveListFiles lists the files of store id, or with batchID of that
// file batch only.
func (s *Service) serveListFiles(w http.ResponseWriter, r *http.Request, owner, id, batchID string) {
	lq, aerr := parseList(r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	lq.BatchID = batchID
	switch f := r.URL.Query().Get("filter"); f {
	case "", StatusInProgress, StatusCompleted, StatusFailed, StatusCancelled:
		lq.Status = f
	default:
		apierror.InvalidParam("filter", "Invalid value: '%s'. Supported values are: 'in_progress', 'completed', 'failed' and 'cancelled'.", f).Write(w)
		return
	}
	fs, more, err := s.listFiles(r.Context(), owner, id, lq)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	out := listObject[fileObject]{Object: "list", Data: make([]fileObject, 0, len(fs)), HasMore: more}
	for _, f := range fs {
		out.Data = append(out.Data, toFileObject(f))
	}
	if len(fs) > 0 {
		out.FirstID, out.LastID = fs[0].FileID, fs[len(fs)-1].FileID
	}
	writeJSON(w, out)
}

func (s *Service) serveGetFile(w http.ResponseWriter, r *http.Request, owner, id, fileID string) {
	f, err := s.getFile(r.Context(), owner, id, fileID)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	setPollAfter(w, f.Status)
	writeJSON(w, toFileObject(f))
}

func (s *Service) serveUpdateFile(w http.ResponseWriter, r *http.Request, owner, id, fileID string) {
	root, aerr := readBody(w, r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	v := root.Get("attributes")
	if !v.Exists() {
		apierror.MissingParam("attributes").Write(w)
		return
	}
	attrs, aerr := parseAttributes(v)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	f, err := s.setAttributes(r.Context(), owner, id, fileID, attrs)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	writeJSON(w, toFileObject(f))
}

func (s *Service) serveDetach(w http.ResponseWriter, r *http.Request, owner, id, fileID string) {
	if err := s.detachFile(r.Context(), owner, id, fileID); err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.log.Info("vectorstores: file detached", "store", id, "file", fileID, "owner", owner)
	writeJSON(w, deletedObject{ID: fileID, Object: "vector_store.file.deleted", Deleted: true})
}

type searchPage struct {
	Object      string       `json:"object"`
	SearchQuery []string     `json:"search_query"`
	Data        []searchItem `json:"data"`
	HasMore     bool         `json:"has_more"`
	NextPage    *string      `json:"next_page"`
}

type searchItem struct {
	FileID     string          `json:"file_id"`
	Filename   string          `json:"filename"`
	Score      float64         `json:"score"`
	Attributes json.RawMessage `json:"attributes"`
	Content    []contentPart   `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// parseSearch reads a search request body.
func parseSearch(root gjson.Result) (searchParams, *apierror.Error) {
	p := searchParams{max: DefaultResults}
	q := root.Get("query")
	switch {
	case !present(q):
		return p, apierror.MissingParam("query")
	case q.Type == gjson.String:
		p.queries = []string{q.Str}
	case q.IsArray():
		arr := q.Array()
		if len(arr) == 0 || len(arr) > MaxQueries {
			return p, apierror.InvalidParam("query", "Invalid 'query': expected 1 to %d queries.", MaxQueries)
		}
		for i, e := range arr {
			if e.Type != gjson.String {
				return p, typeError(fmt.Sprintf("query[%d]", i), "a string")
			}
			p.queries = append(p.queries, e.Str)
		}
	default:
		return p, typeError("query", "a string or an array of strings")
	}
	for _, text := range p.queries {
		if strings.TrimSpace(text) == "" {
			return p, apierror.InvalidParam("query", "Invalid 'query': empty string.")
		}
		if len(text) > MaxQueryBytes {
			return p, apierror.InvalidParam("query", "Invalid 'query': at most %d bytes per query.", MaxQueryBytes)
		}
	}
	if v := root.Get("max_num_results"); present(v) {
		if v.Type != gjson.Number || v.Num != float64(int(v.Num)) || v.Num < 1 || v.Num > MaxResults {
			return p, apierror.InvalidParam("max_num_results", "max_num_results must be an integer between 1 and %d.", MaxResults)
		}
		p.max = int(v.Num)
	}
	if v := root.Get("rewrite_query"); present(v) {
		if !v.IsBool() {
			return p, typeError("rewrite_query", "a boolean")
		}
		if v.Bool() {
			return p, apierror.InvalidParam("rewrite_query", "Query rewriting is not supported on this gateway; send rewrite_query false.")
		}
	}
	if v := root.Get("filters"); present(v) {
		f, aerr := parseFilter(v, "filters", 0)
		if aerr != nil {
			return p, aerr
		}
		p.filter = f
	}
	if v := root.Get("ranking_options"); present(v) {
		if !v.IsObject() {
			return p, typeError("ranking_options", "an object")
		}
		// The ranker is accepted whatever it names: this gateway does not
		// re-rank, which is what "none" asks for and the others may skip.
		if r := v.Get("ranker"); present(r) && r.Type != gjson.String {
			return p, typeError("ranking_options.ranker", "a string")
		}
		if t := v.Get("score_threshold"); present(t) {
			if t.Type != gjson.Number || t.Num < 0 || t.Num > 1 {
				return p, apierror.InvalidParam("ranking_options.score_threshold", "score_threshold must be a number between 0 and 1.")
			}
			p.threshold = t.Num
		}
	}
	return p, nil
}

func (s *Service) serveSearch(w http.ResponseWriter, r *http.Request, owner, id string) {
	root, aerr := readBody(w, r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	p, aerr := parseSearch(root)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	results, err := s.search(r.Context(), owner, []string{id}, p)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.log.Debug("vectorstores: searched", "store", id, "owner", owner, "queries", len(p.queries), "results", len(results))
	page := searchPage{Object: "vector_store.search_results.page", SearchQuery: p.queries,
		Data: make([]searchItem, 0, len(results))}
	for _, res := range results {
		page.Data = append(page.Data, searchItem{FileID: res.FileID, Filename: res.Filename, Score: res.Score,
			Attributes: res.Attributes, Content: []contentPart{{Type: "text", Text: res.Text}}})
	}
	writeJSON(w, page)
}

// pollAfter is the openai-poll-after-ms the API answers on a file batch or
// a store's file still being indexed: the SDKs' poll helpers wait that long
// before asking again (5 s without it). A few small files index in tens of
// milliseconds, and a poll is one indexed read.
const pollAfter = 200 * time.Millisecond

// setPollAfter asks a poller to come back in pollAfter while status is in
// progress.
func setPollAfter(w http.ResponseWriter, status string) {
	if status == StatusInProgress {
		w.Header().Set("openai-poll-after-ms", strconv.FormatInt(pollAfter.Milliseconds(), 10))
	}
}
