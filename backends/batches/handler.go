package batches

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/metadata"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Endpoints a batch may target.
var endpoints = []string{"/v1/chat/completions", "/v1/embeddings", "/v1/responses"}

// Bounds of output_expires_after.seconds (OpenAI's).
const (
	minOutputExpiry = 3600
	maxOutputExpiry = 30 * 24 * 3600
)

// maxCreateBody bounds a create request: three short strings and metadata
// of at most 16 × (64 + 512) characters.
const maxCreateBody = 1 << 20

const (
	defaultListLimit = 20
	maxListLimit     = 100
)

// Handler serves /v1/batches, /v1/batches/{id} and /v1/batches/{id}/cancel.
// The caller must be in the request context (caller.Require); without one
// the request is refused with 401.
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := caller.Of(w, r)
		if !ok {
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/batches")
		switch {
		case !ok:
			apierror.NotFound(r.URL.Path).Write(w)
		case rest == "" || rest == "/":
			switch r.Method {
			case http.MethodPost:
				s.create(w, r, c)
			case http.MethodGet, http.MethodHead:
				s.list(w, r, c.Owner)
			default:
				apierror.WriteMethodNotAllowed(w, r, "GET, HEAD, POST")
			}
		default:
			id, action, _ := strings.Cut(rest[1:], "/")
			switch {
			case rest[0] != '/' || id == "":
				apierror.NotFound(r.URL.Path).Write(w)
			case action == "":
				if r.Method != http.MethodGet && r.Method != http.MethodHead {
					apierror.WriteMethodNotAllowed(w, r, "GET, HEAD")
					return
				}
				s.get(w, r, c.Owner, id)
			case action == "cancel":
				if r.Method != http.MethodPost {
					apierror.WriteMethodNotAllowed(w, r, http.MethodPost)
					return
				}
				s.cancel(w, r, c.Owner, id)
			default:
				apierror.NotFound(r.URL.Path).Write(w)
			}
		}
	})
}

func notFound(id string) *apierror.Error {
	return &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "id",
		Message: fmt.Sprintf("No such Batch object: %s", clipID(id))}
}

// clipID keeps an id echoed in an error message short: it is the caller's
// input and may be anything.
func clipID(id string) string {
	if len(id) > 128 {
		return id[:128] + "…"
	}
	return id
}

func (s *Service) serverError(w http.ResponseWriter, op string, err error) {
	s.log.Error("batches: "+op+" failed", "err", err)
	apierror.Server(http.StatusInternalServerError, "server_error",
		"The server had an error while processing your request. Sorry about that!").Write(w)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen: plain structs of strings and numbers
		panic(err)
	}
	w.Header().Set("content-type", "application/json")
	_, _ = w.Write(b)
}

// createRequest is CreateBatchRequest. Every field is raw so a wrong type is
// reported naming the field rather than as unparseable JSON.
type createRequest struct {
	InputFileID        json.RawMessage `json:"input_file_id"`
	Endpoint           json.RawMessage `json:"endpoint"`
	CompletionWindow   json.RawMessage `json:"completion_window"`
	Metadata           json.RawMessage `json:"metadata"`
	OutputExpiresAfter json.RawMessage `json:"output_expires_after"`
}

// stringParam decodes a required string field.
func stringParam(raw json.RawMessage, name string) (string, *apierror.Error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", apierror.MissingParam(name)
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", &apierror.Error{Status: http.StatusBadRequest, Code: "invalid_type", Param: name,
			Message: fmt.Sprintf("Invalid type for '%s': expected a string.", name)}
	}
	return v, nil
}

func (s *Service) create(w http.ResponseWriter, r *http.Request, c caller.Caller) {
	owner := c.Owner
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCreateBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			apierror.TooLarge(maxCreateBody).Write(w)
			return
		}
		apierror.InvalidJSON().Write(w)
		return
	}
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		apierror.InvalidJSON().Write(w)
		return
	}
	b, aerr := s.parseCreate(r.Context(), owner, &req)
	if aerr != nil {
		aerr.Write(w)
		return
	}
	al := s.allowanceFor(c)
	if al != nil {
		n, over, err := s.countLines(r.Context(), owner, b.InputFileID, al.LinesPerDay)
		switch {
		case errors.Is(err, files.ErrNotFound):
			(&apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "input_file_id",
				Message: fmt.Sprintf("No such File object: %s", clipID(b.InputFileID))}).Write(w)
			return
		case err != nil:
			s.serverError(w, "create: counting the input's lines", err)
			return
		case over:
			overAllowance(c.Tier, al.LinesPerDay).Write(w)
			return
		}
		b.Lines = n
	}
	if err := s.store.Create(r.Context(), b, MaxActive, al); err != nil {
		if errors.Is(err, ErrLimit) {
			(&apierror.Error{Status: http.StatusTooManyRequests, Type: apierror.TypeRequests, Code: "batch_limit_exceeded",
				Message: fmt.Sprintf("You have %d batches that have not finished; wait for one to finish or cancel one before creating another.", MaxActive)}).Write(w)
			return
		}
		if errors.Is(err, ErrAllowance) {
			s.log.Info("batch refused: daily line allowance reached", "owner", owner, "tier", c.Tier,
				"limit", al.LinesPerDay, "used", al.Used, "requested", b.Lines)
			allowanceReached(c.Tier, al, b.Lines, time.Unix(b.CreatedAt, 0)).Write(w)
			return
		}
		s.serverError(w, "create", err)
		return
	}
	s.log.Info("batch created", "batch", b.ID, "owner", owner, "input_file", b.InputFileID, "endpoint", b.Endpoint)
	s.poke()
	writeJSON(w, b.object())
}

// parseCreate checks a create request in OpenAI's order (required fields,
// values, then the file) and returns the new batch.
func (s *Service) parseCreate(ctx context.Context, owner string, req *createRequest) (Batch, *apierror.Error) {
	fileID, aerr := stringParam(req.InputFileID, "input_file_id")
	if aerr != nil {
		return Batch{}, aerr
	}
	endpoint, aerr := stringParam(req.Endpoint, "endpoint")
	if aerr != nil {
		return Batch{}, aerr
	}
	window, aerr := stringParam(req.CompletionWindow, "completion_window")
	if aerr != nil {
		return Batch{}, aerr
	}
	okEndpoint := false
	for _, e := range endpoints {
		okEndpoint = okEndpoint || e == endpoint
	}
	if !okEndpoint {
		return Batch{}, apierror.InvalidParam("endpoint", "Invalid value for 'endpoint': %q is not supported. Supported values are: %s.",
			clipID(endpoint), strings.Join(endpoints, ", "))
	}
	if window != completionWindow {
		return Batch{}, apierror.InvalidParam("completion_window", "Invalid value for 'completion_window': %q is not supported. Supported values are: '24h'.",
			clipID(window))
	}
	meta, aerr := parseMetadata(req.Metadata)
	if aerr != nil {
		return Batch{}, aerr
	}

	expiry, aerr := parseOutputExpiry(req.OutputExpiresAfter)
	if aerr != nil {
		return Batch{}, aerr
	}

	f, err := s.files.Get(ctx, owner, fileID)
	if errors.Is(err, files.ErrNotFound) {
		return Batch{}, &apierror.Error{Status: http.StatusNotFound, Code: "not_found", Param: "input_file_id",
			Message: fmt.Sprintf("No such File object: %s", clipID(fileID))}
	}
	if err != nil {
		s.log.Error("batches: create: reading the input file's metadata failed", "file", fileID, "err", err)
		return Batch{}, apierror.Server(http.StatusInternalServerError, "server_error",
			"The server had an error while processing your request. Sorry about that!")
	}
	if f.Purpose != "batch" {
		return Batch{}, apierror.InvalidParam("input_file_id",
			"The file %s has purpose '%s'; a batch's input file must be uploaded with purpose 'batch'.", f.ID, f.Purpose)
	}

	now := s.opts.Now()
	return Batch{
		ID:                 newID("batch_"),
		Owner:              owner,
		Endpoint:           endpoint,
		InputFileID:        f.ID,
		CompletionWindow:   completionWindow,
		Status:             StatusValidating,
		CreatedAt:          now.Unix(),
		ExpiresAt:          now.Add(completionWindowDur).Unix(),
		Metadata:           meta,
		OutputExpiresAfter: expiry,
	}, nil
}

// parseMetadata checks metadata (package metadata) and returns it as the
// map the store keeps.
func parseMetadata(raw json.RawMessage) (map[string]string, *apierror.Error) {
	kept, aerr := metadata.Parse(gjson.ParseBytes(raw))
	if aerr != nil || kept == nil {
		return nil, aerr
	}
	var m map[string]string
	if err := json.Unmarshal(kept, &m); err != nil { // cannot happen: Parse checked every value is a string
		return nil, apierror.InvalidParam("metadata", "Invalid 'metadata': expected an object of strings.")
	}
	return m, nil
}

// parseOutputExpiry checks output_expires_after and returns its seconds, 0
// when absent (the default retention).
func parseOutputExpiry(raw json.RawMessage) (int64, *apierror.Error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	var v struct {
		Anchor  *string `json:"anchor"`
		Seconds *int64  `json:"seconds"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, apierror.InvalidParam("output_expires_after", "Invalid 'output_expires_after': expected an object {anchor, seconds}.")
	}
	if v.Anchor == nil {
		return 0, apierror.MissingParam("output_expires_after.anchor")
	}
	if *v.Anchor != "created_at" {
		return 0, apierror.InvalidParam("output_expires_after.anchor", "Invalid value for 'output_expires_after.anchor': supported values are: 'created_at'.")
	}
	if v.Seconds == nil {
		return 0, apierror.MissingParam("output_expires_after.seconds")
	}
	if *v.Seconds < minOutputExpiry || *v.Seconds > maxOutputExpiry {
		return 0, apierror.InvalidParam("output_expires_after.seconds", "Invalid 'output_expires_after.seconds': expected an integer from %d to %d.",
			minOutputExpiry, maxOutputExpiry)
	}
	return *v.Seconds, nil
}

func (s *Service) get(w http.ResponseWriter, r *http.Request, owner, id string) {
	b, err := s.store.Get(r.Context(), owner, id)
	if errors.Is(err, ErrNotFound) {
		notFound(id).Write(w)
		return
	}
	if err != nil {
		s.serverError(w, "get", err)
		return
	}
	writeJSON(w, b.object())
}

// listResponse is ListBatchesResponse. first_id and last_id are left out of
// an empty page: the schema types them as strings, not null.
type listResponse struct {
	Object  string        `json:"object"`
	Data    []batchObject `json:"data"`
	FirstID string        `json:"first_id,omitempty"`
	LastID  string        `json:"last_id,omitempty"`
	HasMore bool          `json:"has_more"`
}

func (s *Service) list(w http.ResponseWriter, r *http.Request, owner string) {
	q := r.URL.Query()
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			apierror.InvalidParam("limit", "Invalid 'limit': expected an integer from 1 to %d.", maxListLimit).Write(w)
			return
		}
		limit = n
	}
	bs, more, err := s.store.List(r.Context(), owner, q.Get("after"), limit)
	if errors.Is(err, ErrBadCursor) {
		apierror.InvalidParam("after", "Invalid 'after': no such Batch object: %s", clipID(q.Get("after"))).Write(w)
		return
	}
	if err != nil {
		s.serverError(w, "list", err)
		return
	}
	resp := listResponse{Object: "list", Data: make([]batchObject, 0, len(bs)), HasMore: more}
	for _, b := range bs {
		resp.Data = append(resp.Data, b.object())
	}
	if len(bs) > 0 {
		resp.FirstID, resp.LastID = bs[0].ID, bs[len(bs)-1].ID
	}
	writeJSON(w, resp)
}

// cancel moves a validating or in-progress batch to cancelling and tells its
// runner; the runner lets in-flight lines finish, then makes the partial
// files and marks it cancelled.
func (s *Service) cancel(w http.ResponseWriter, r *http.Request, owner, id string) {
	ctx := r.Context()
	// A few rounds: the runner may move the batch between our read and our
	// compare-and-set (validating -> in_progress), which is still
	// cancellable.
	for range 3 {
		b, err := s.store.Get(ctx, owner, id)
		if errors.Is(err, ErrNotFound) {
			notFound(id).Write(w)
			return
		}
		if err != nil {
			s.serverError(w, "cancel", err)
			return
		}
		switch b.Status {
		case StatusCancelling:
			writeJSON(w, b.object())
			return
		case StatusValidating, StatusInProgress:
		default:
			(&apierror.Error{Status: http.StatusConflict, Code: "invalid_batch_status",
				Message: fmt.Sprintf("Cannot cancel a batch with status '%s'.", b.Status)}).Write(w)
			return
		}
		ok, err := s.store.Transition(ctx, id, []string{StatusValidating, StatusInProgress}, StatusCancelling, s.opts.Now(), Change{})
		if err != nil {
			s.serverError(w, "cancel", err)
			return
		}
		if !ok {
			continue
		}
		s.log.Info("batch cancelling", "batch", id, "owner", owner)
		s.signalCancel(id)
		if b, err = s.store.Get(ctx, owner, id); err != nil {
			s.serverError(w, "cancel", err)
			return
		}
		writeJSON(w, b.object())
		return
	}
	s.serverError(w, "cancel", fmt.Errorf("batch %s kept changing status", id))
}

// batchObject is the Batch schema. Fields that are unset are left out rather
// than null: the schema types them as plain strings, integers and objects
// (not nullable), and the SDKs treat a missing field as unset.
type batchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Model            string            `json:"model,omitempty"`
	Errors           *batchErrors      `json:"errors,omitempty"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     string            `json:"output_file_id,omitempty"`
	ErrorFileID      string            `json:"error_file_id,omitempty"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     int64             `json:"in_progress_at,omitzero"`
	ExpiresAt        int64             `json:"expires_at,omitzero"`
	FinalizingAt     int64             `json:"finalizing_at,omitzero"`
	CompletedAt      int64             `json:"completed_at,omitzero"`
	FailedAt         int64             `json:"failed_at,omitzero"`
	ExpiredAt        int64             `json:"expired_at,omitzero"`
	CancellingAt     int64             `json:"cancelling_at,omitzero"`
	CancelledAt      int64             `json:"cancelled_at,omitzero"`
	RequestCounts    requestCounts     `json:"request_counts"`
	Usage            batchUsage        `json:"usage"`
	Metadata         map[string]string `json:"metadata"`
}

type batchErrors struct {
	Object string       `json:"object"`
	Data   []BatchError `json:"data"`
}

type requestCounts struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

type batchUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

func (b Batch) object() batchObject {
	o := batchObject{
		ID: b.ID, Object: "batch", Endpoint: b.Endpoint, Model: b.Model,
		InputFileID: b.InputFileID, CompletionWindow: b.CompletionWindow, Status: b.Status,
		OutputFileID: b.OutputFileID, ErrorFileID: b.ErrorFileID,
		CreatedAt: b.CreatedAt, InProgressAt: b.InProgressAt, ExpiresAt: b.ExpiresAt,
		FinalizingAt: b.FinalizingAt, CompletedAt: b.CompletedAt, FailedAt: b.FailedAt,
		ExpiredAt: b.ExpiredAt, CancellingAt: b.CancellingAt, CancelledAt: b.CancelledAt,
		RequestCounts: requestCounts{Total: b.Counts.Total, Completed: b.Counts.Completed, Failed: b.Counts.Failed},
		Metadata:      b.Metadata,
	}
	if len(b.Errors) > 0 {
		o.Errors = &batchErrors{Object: "list", Data: b.Errors}
	}
	u := &o.Usage
	u.InputTokens, u.OutputTokens, u.TotalTokens = b.Counts.InputTokens, b.Counts.OutputTokens, b.Counts.TotalTokens
	u.InputTokensDetails.CachedTokens = b.Counts.CachedTokens
	u.OutputTokensDetails.ReasoningTokens = b.Counts.ReasoningTokens
	return o
}

// newID returns prefix followed by 32 random hex digits.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return prefix + hex.EncodeToString(b[:])
}
