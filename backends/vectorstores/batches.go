package vectorstores

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// File batches: /v1/vector_stores/{id}/file_batches. A batch attaches many
// files in one request (the official SDKs' uploadAndPoll helpers use it);
// its status and file_counts are those of its files, so it needs no
// indexing of its own.

// batchObject is the VectorStoreFileBatchObject schema.
type batchObject struct {
	ID            string     `json:"id"`
	Object        string     `json:"object"`
	CreatedAt     int64      `json:"created_at"`
	VectorStoreID string     `json:"vector_store_id"`
	Status        string     `json:"status"`
	FileCounts    fileCounts `json:"file_counts"`
}

func toBatchObject(b BatchRow) batchObject {
	c := b.Counts
	return batchObject{ID: b.ID, Object: "vector_store.files_batch", CreatedAt: b.CreatedAt.Unix(), VectorStoreID: b.StoreID,
		Status: b.Status(), FileCounts: fileCounts{InProgress: c.InProgress, Completed: c.Completed, Failed: c.Failed,
			Cancelled: c.Cancelled, Total: c.Total}}
}

// batchFile is one file a batch request names, with its settings.
type batchFile struct {
	id              string
	param           string // the field naming it, for a 404
	tokens, overlap int
	attrs           []byte
}

// parseBatch reads a create request: file_ids (with the request's
// attributes and chunking_strategy for all of them) or files (each with
// its own; the request's are then ignored, as OpenAI documents).
func parseBatch(root gjson.Result) ([]batchFile, *apierror.Error) {
	ids, files := root.Get("file_ids"), root.Get("files")
	switch {
	case present(ids) && present(files):
		return nil, apierror.InvalidParam("files", "'file_ids' and 'files' are mutually exclusive: send one of them.")
	case !present(ids) && !present(files):
		return nil, apierror.MissingParam("file_ids")
	}
	param, list := "file_ids", ids
	if present(files) {
		param, list = "files", files
	}
	if !list.IsArray() {
		if param == "files" {
			return nil, typeError(param, "an array of objects")
		}
		return nil, typeError(param, "an array of strings")
	}
	arr := list.Array()
	if len(arr) == 0 || len(arr) > MaxBatchFiles {
		return nil, apierror.InvalidParam(param, "Invalid '%s': expected 1 to %d files per batch, got %d.", param, MaxBatchFiles, len(arr))
	}
	out := make([]batchFile, 0, len(arr))
	seen := make(map[string]bool, len(arr))
	if param == "file_ids" {
		tokens, overlap, aerr := parseChunking(root.Get("chunking_strategy"))
		if aerr != nil {
			return nil, aerr
		}
		attrs, aerr := parseAttributes(root.Get("attributes"))
		if aerr != nil {
			return nil, aerr
		}
		for i, id := range arr {
			if id.Type != gjson.String || id.Str == "" {
				return nil, typeError(fmt.Sprintf("file_ids[%d]", i), "a file id")
			}
			// A file named twice is attached once.
			if !seen[id.Str] {
				seen[id.Str] = true
				out = append(out, batchFile{id: id.Str, param: "file_ids", tokens: tokens, overlap: overlap, attrs: attrs})
			}
		}
		return out, nil
	}
	for i, f := range arr {
		at := fmt.Sprintf("files[%d]", i)
		if !f.IsObject() {
			return nil, typeError(at, "an object")
		}
		id := f.Get("file_id")
		if !present(id) {
			return nil, apierror.MissingParam(at + ".file_id")
		}
		if id.Type != gjson.String || id.Str == "" {
			return nil, typeError(at+".file_id", "a file id")
		}
		// Two entries for one file would ask for two settings of it.
		if seen[id.Str] {
			return nil, apierror.InvalidParam(at+".file_id", "File '%s' appears more than once in 'files'.", id.Str)
		}
		seen[id.Str] = true
		tokens, overlap, aerr := parseChunkingAt(f.Get("chunking_strategy"), at+".chunking_strategy")
		if aerr != nil {
			return nil, aerr
		}
		attrs, aerr := parseAttributesAt(f.Get("attributes"), at+".attributes")
		if aerr != nil {
			return nil, aerr
		}
		out = append(out, batchFile{id: id.Str, param: at + ".file_id", tokens: tokens, overlap: overlap, attrs: attrs})
	}
	return out, nil
}

func (s *Service) serveCreateBatch(w http.ResponseWriter, r *http.Request, owner, id string) {
	root, aerr := readBody(w, r)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	bfs, aerr := parseBatch(root)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	// The store first: a missing store is the 404 to report.
	if _, err := s.getStore(r.Context(), owner, id); err != nil {
		s.apiError(err).Write(w)
		return
	}
	now := s.now()
	rows := make([]FileRow, 0, len(bfs))
	for _, bf := range bfs {
		f, aerr := s.ownerFile(r, owner, bf.id, bf.param)
		if aerr != nil {
			aerr.Write(w)
			return
		}
		rows = append(rows, newFile(id, owner, f.ID, f.Filename, bf.tokens, bf.overlap, bf.attrs, now))
	}
	b, err := s.createBatch(r.Context(), BatchRow{ID: newIDWith(batchIDPrefix), StoreID: id, Owner: owner, CreatedAt: now}, rows)
	if errors.Is(err, ErrStoreFull) {
		param := "file_ids"
		if present(root.Get("files")) {
			param = "files"
		}
		apierror.InvalidParam(param, "A vector store may hold at most %d files.", MaxFilesPerStore).Write(w)
		return
	}
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.log.Info("vectorstores: file batch created", "store", id, "batch", b.ID, "owner", owner, "files", len(rows))
	setPollAfter(w, b.Status())
	writeJSON(w, toBatchObject(b))
}

func (s *Service) serveGetBatch(w http.ResponseWriter, r *http.Request, owner, id, batchID string) {
	b, err := s.getBatch(r.Context(), owner, id, batchID)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	setPollAfter(w, b.Status())
	writeJSON(w, toBatchObject(b))
}

func (s *Service) serveCancelBatch(w http.ResponseWriter, r *http.Request, owner, id, batchID string) {
	b, err := s.cancelBatch(r.Context(), owner, id, batchID)
	if err != nil {
		s.apiError(err).Write(w)
		return
	}
	s.log.Info("vectorstores: file batch cancelled", "store", id, "batch", batchID, "owner", owner, "cancelled", b.Counts.Cancelled)
	writeJSON(w, toBatchObject(b))
}
