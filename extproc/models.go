package extproc

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// GET /v1/models and GET /v1/models/{id} are answered by extproc itself, as
// an immediate response to the request headers: the catalog extproc holds
// is the authority on which models exist, and the key it has just checked
// says which of them the client may use. Nothing goes upstream.

// modelObject is a model in OpenAI's Model shape (id, object, created,
// owned_by) plus Switchyard's context_window and capabilities, which
// OpenAI's clients ignore and others use.
type modelObject struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	Created       int64    `json:"created"`
	OwnedBy       string   `json:"owned_by"`
	ContextWindow int      `json:"context_window"`
	Capabilities  []string `json:"capabilities"`
}

// ownedBy is the vendor part of a model id ("acme" for "acme/large").
func ownedBy(id string) string {
	vendor, _, _ := strings.Cut(id, "/")
	return vendor
}

var (
	listPrefix = []byte(`{"object":"list","data":[`)
	listSuffix = []byte(`]}`)
)

// models answers a request for path (modelsPath or below it) at once.
func (st *stream) models(method, path string) *extprocv3.ProcessingResponse {
	if method != http.MethodGet {
		return immediate(&apierror.Error{Status: http.StatusMethodNotAllowed,
			Message: fmt.Sprintf("Invalid method for URL (%s %s).", clip(method), clip(path))}, "allow", http.MethodGet)
	}
	rt := st.srv.routes.Load()
	id := strings.TrimPrefix(strings.TrimPrefix(path, modelsPath), "/")
	if id == "" {
		// The models the key may use, in catalog order; each is rendered
		// once per catalog, so the list is a join.
		var b bytes.Buffer
		b.Grow(len(listPrefix) + len(listSuffix) + len(rt.order)*160)
		b.Write(listPrefix)
		n := 0
		for _, m := range rt.order {
			if !st.key.AllowsModel(m.id) {
				continue
			}
			if n > 0 {
				b.WriteByte(',')
			}
			b.Write(m.listing)
			n++
		}
		b.Write(listSuffix)
		return immediateJSON(http.StatusOK, b.Bytes())
	}
	// Model ids contain a slash, which SDKs escape in the path
	// (/v1/models/acme%2Flarge); accept it escaped or not.
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	m, ok := rt.models[id]
	if !ok || !st.key.AllowsModel(m.id) {
		return immediate(apierror.ModelNotFound(clip(id)))
	}
	return immediateJSON(http.StatusOK, m.listing)
}

// immediateJSON answers the client with a JSON body.
func immediateJSON(status int, body []byte) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "application/json"),
			}},
			Body:    body,
			Details: "switchyard_models",
		}},
	}
}
