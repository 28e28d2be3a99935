package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

const (
	basePath = "/v1/files"

	// formOverhead is what a multipart body may carry beyond the file
	// itself (boundaries, part headers, the small fields); the request body
	// as a whole is cut at MaxBytes plus this.
	formOverhead = 1 << 20
	// maxFieldBytes bounds a non-file field (purpose, expires_after[...]):
	// they are read into memory, so they must be small.
	maxFieldBytes = 4 << 10
	// maxParts bounds how many parts a form may have, so a client cannot
	// keep the handler busy with endless junk fields.
	maxParts = 32
)

// Handler serves /v1/files, /v1/files/{id} and /v1/files/{id}/content for
// the caller that caller.Require put in the request context.
func (s *Store) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Store) serveHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := caller.Of(w, r)
	if !ok {
		// Mounted without caller.Require: refused rather than serve files
		// without an owner to filter on.
		s.log.Error("files: request without a caller; is the handler behind caller.Require?", "path", r.URL.Path)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, basePath)
	switch {
	case !ok:
	case rest == "" || rest == "/":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.serveList(w, r, c.Owner)
		case http.MethodPost:
			s.serveUpload(w, r, c.Owner)
		default:
			apierror.WriteMethodNotAllowed(w, r, "GET, HEAD, POST")
		}
		return
	case rest[0] == '/':
		id, sub, nested := strings.Cut(rest[1:], "/")
		if id == "" {
			break
		}
		switch {
		case !nested:
			switch r.Method {
			case http.MethodGet, http.MethodHead:
				s.serveGet(w, r, c.Owner, id)
			case http.MethodDelete:
				s.serveDelete(w, r, c.Owner, id)
			default:
				apierror.WriteMethodNotAllowed(w, r, "GET, HEAD, DELETE")
			}
			return
		case sub == "content":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				apierror.WriteMethodNotAllowed(w, r, "GET, HEAD")
				return
			}
			s.serveContent(w, r, c.Owner, id)
			return
		}
	}
	apierror.NotFound(r.URL.Path).Write(w)
}

// apiError maps the package's errors to what the client sees; it is the one
// place that does. id names the file a 404 is about. Anything unexpected is
// logged here and becomes a generic 500.
func (s *Store) apiError(err error, id string) *apierror.Error {
	var (
		ae  *apierror.Error
		inv *invalidError
		mbe *http.MaxBytesError
		rde *readError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, ErrNotFound):
		return &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "id",
			Message: "No such File object: " + id}
	case errors.Is(err, ErrTooLarge), errors.As(err, &mbe):
		// MaxBytesError: the body as a whole went over MaxBytes plus the
		// form's overhead, which only a file over the limit can do.
		return &apierror.Error{Status: http.StatusRequestEntityTooLarge, Code: "file_too_large", Param: "file",
			Message: fmt.Sprintf("File is too large: the maximum size is %d bytes.", s.maxBytes)}
	case errors.As(err, &inv):
		return apierror.InvalidParam(inv.param, "%s", inv.msg)
	case errors.As(err, &rde):
		return apierror.InvalidParam("file",
			"The upload could not be read: the request body ended early or is not valid multipart/form-data.")
	}
	s.log.Error("files: request failed", "id", id, "err", err)
	return apierror.Server(http.StatusInternalServerError, "internal_error",
		"The server had an error while processing your request.")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// fileObject is OpenAI's file object. expires_at is left out, rather than
// null, for a file kept until deleted, and the deprecated status_details is
// left out: the official schema types both as non-nullable, and the SDKs
// read an absent field as unset.
type fileObject struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt *int64 `json:"expires_at,omitempty"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
}

func toObject(f File) fileObject {
	o := fileObject{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(),
		Filename: f.Filename, Purpose: f.Purpose, Status: "processed"}
	if !f.ExpiresAt.IsZero() {
		e := f.ExpiresAt.Unix()
		o.ExpiresAt = &e
	}
	return o
}

type listObject struct {
	Object  string       `json:"object"`
	Data    []fileObject `json:"data"`
	FirstID string       `json:"first_id"`
	LastID  string       `json:"last_id"`
	HasMore bool         `json:"has_more"`
}

type deletedObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// uploadForm is what the non-file fields of an upload said; they may come
// before or after the file.
type uploadForm struct {
	purpose, anchor, seconds          string
	hasPurpose, hasAnchor, hasSeconds bool
}

// uploadablePurpose rejects purposes a client may not upload.
func uploadablePurpose(p string) error {
	if p == PurposeBatchOutput || !knownPurpose(p) {
		return invalidf("purpose", "Invalid purpose %q: expected one of 'assistants', 'batch', 'fine-tune', "+
			"'vision', 'user_data', 'evals'.", p)
	}
	return nil
}

// checkFileForPurpose applies what the purpose requires of the file itself:
// batch input must be JSONL (its lines are validated by the batch).
func checkFileForPurpose(purpose, filename string) error {
	if purpose == PurposeBatch && !strings.HasSuffix(strings.ToLower(filename), ".jsonl") {
		return invalidf("file", "A file with purpose 'batch' must be a .jsonl file, got %q.", filename)
	}
	return nil
}

// expiresAfter parses expires_after[anchor] and expires_after[seconds]:
// 0 when absent (kept until deleted).
func (f *uploadForm) expiresAfter() (time.Duration, error) {
	if !f.hasAnchor && !f.hasSeconds {
		return 0, nil
	}
	if !f.hasAnchor {
		return 0, apierror.MissingParam("expires_after.anchor")
	}
	if !f.hasSeconds {
		return 0, apierror.MissingParam("expires_after.seconds")
	}
	if f.anchor != "created_at" {
		return 0, invalidf("expires_after.anchor", "Invalid anchor %q: the only supported anchor is 'created_at'.", f.anchor)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(f.seconds), 10, 64)
	if err != nil || n < int64(MinExpiresAfter/time.Second) || n > int64(MaxExpiresAfter/time.Second) {
		return 0, invalidf("expires_after.seconds", "expires_after.seconds must be an integer between %d and %d.",
			int64(MinExpiresAfter/time.Second), int64(MaxExpiresAfter/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

func readField(p *multipart.Part) (string, error) {
	b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
	if err != nil {
		return "", &readError{err: err}
	}
	if len(b) > maxFieldBytes {
		return "", invalidf(p.FormName(), "The field %q is too long.", p.FormName())
	}
	return string(b), nil
}

// serveUpload reads the multipart form as a stream, part by part: the file
// goes straight to a part file on disk (r.ParseMultipartForm would buffer it
// in memory or a temporary file of its own). When the purpose comes first, as
// the Python and Node SDKs send it, a bad purpose is refused before the file
// is read; when the file comes first, as the Go SDK sends it, the file is
// staged and discarded if the fields that follow turn out invalid.
func (s *Store) serveUpload(w http.ResponseWriter, r *http.Request, owner string) {
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBytes+formOverhead)
	mr, err := r.MultipartReader()
	if err != nil {
		apierror.InvalidParam("", "The request body must be multipart/form-data with the fields 'purpose' and 'file'.").Write(w)
		return
	}
	var (
		form     uploadForm
		st       *staged
		filename string
	)
	defer func() {
		if st != nil {
			s.discard(r.Context(), st.id)
		}
	}()
	fail := func(err error) { s.apiError(err, "").Write(w) }
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(&readError{err: err})
			return
		}
		if parts == maxParts {
			fail(invalidf("", "The form has too many fields."))
			return
		}
		switch name := p.FormName(); name {
		case "file":
			if st != nil {
				fail(invalidf("file", "Only one file may be uploaded per request."))
				return
			}
			filename = p.FileName()
			if err := validateFilename(filename); err != nil {
				fail(err)
				return
			}
			if form.hasPurpose {
				if err := uploadablePurpose(form.purpose); err != nil {
					fail(err)
					return
				}
				if err := checkFileForPurpose(form.purpose, filename); err != nil {
					fail(err)
					return
				}
			}
			if st, err = s.stage(r.Context(), p, s.maxBytes); err != nil {
				fail(err)
				return
			}
		case "purpose", "expires_after[anchor]", "expires_after.anchor", "expires_after[seconds]", "expires_after.seconds":
			v, err := readField(p)
			if err != nil {
				fail(err)
				return
			}
			switch name {
			case "purpose":
				form.purpose, form.hasPurpose = v, true
			case "expires_after[anchor]", "expires_after.anchor":
				form.anchor, form.hasAnchor = v, true
			default:
				form.seconds, form.hasSeconds = v, true
			}
		default:
			// Unknown fields are ignored, as long as they are small.
			if _, err := readField(p); err != nil {
				fail(err)
				return
			}
		}
	}
	if !form.hasPurpose {
		fail(apierror.MissingParam("purpose"))
		return
	}
	if err := uploadablePurpose(form.purpose); err != nil {
		fail(err)
		return
	}
	if st == nil {
		fail(apierror.MissingParam("file"))
		return
	}
	if err := checkFileForPurpose(form.purpose, filename); err != nil {
		fail(err)
		return
	}
	after, err := form.expiresAfter()
	if err != nil {
		fail(err)
		return
	}
	f, err := s.commit(r.Context(), st, owner, File{Filename: filename, Purpose: form.purpose}, after)
	st = nil // commit consumed it
	if err != nil {
		fail(err)
		return
	}
	s.log.Info("files: created", "id", f.ID, "owner", owner, "bytes", f.Bytes, "purpose", f.Purpose)
	writeJSON(w, toObject(f))
}

func (s *Store) serveList(w http.ResponseWriter, r *http.Request, owner string) {
	q := r.URL.Query()
	lq := ListQuery{Purpose: q.Get("purpose"), Order: q.Get("order"), After: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			s.apiError(invalidf("limit", "limit must be an integer between 1 and %d.", MaxListLimit), "").Write(w)
			return
		}
		lq.Limit = n
	}
	files, more, err := s.List(r.Context(), owner, lq)
	if err != nil {
		s.apiError(err, "").Write(w)
		return
	}
	out := listObject{Object: "list", Data: make([]fileObject, 0, len(files)), HasMore: more}
	for _, f := range files {
		out.Data = append(out.Data, toObject(f))
	}
	if len(files) > 0 {
		out.FirstID, out.LastID = files[0].ID, files[len(files)-1].ID
	}
	writeJSON(w, out)
}

func (s *Store) serveGet(w http.ResponseWriter, r *http.Request, owner, id string) {
	f, err := s.Get(r.Context(), owner, id)
	if err != nil {
		s.apiError(err, id).Write(w)
		return
	}
	writeJSON(w, toObject(f))
}

// serveContent streams the file's content, opened (and authenticated) as
// it is read; it is never held in memory. Range requests are not
// served (OpenAI's API has none), which also keeps every error in the
// OpenAI shape rather than http.ServeContent's plain-text ones.
func (s *Store) serveContent(w http.ResponseWriter, r *http.Request, owner, id string) {
	f, fh, err := s.Open(r.Context(), owner, id)
	if err != nil {
		s.apiError(err, id).Write(w)
		return
	}
	defer fh.Close()
	ct := "application/octet-stream"
	if strings.HasSuffix(strings.ToLower(f.Filename), ".jsonl") {
		ct = "application/jsonl"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// The filename is the client's, and may hold quotes, semicolons or
	// control characters: FormatMediaType quotes it, or percent-encodes it
	// as filename* (RFC 2231), so it can never end the header or add a
	// parameter.
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename}); cd != "" {
		w.Header().Set("Content-Disposition", cd)
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return // the headers say it all; do not read the blob to discard it
	}
	if _, err := io.Copy(w, fh); err != nil {
		// Headers are gone; the client sees a short body. Usually it left.
		s.log.Info("files: content download interrupted", "id", id, "owner", owner, "err", err)
	}
}

func (s *Store) serveDelete(w http.ResponseWriter, r *http.Request, owner, id string) {
	if err := s.Delete(r.Context(), owner, id); err != nil {
		s.apiError(err, id).Write(w)
		return
	}
	s.log.Info("files: deleted", "id", id, "owner", owner)
	writeJSON(w, deletedObject{ID: id, Object: "file", Deleted: true})
}
