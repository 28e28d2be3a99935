package fake

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// maxBody bounds request bodies; real upstreams reject far smaller ones, and
// a fake must not be the thing that runs a test machine out of memory.
const maxBody = 32 << 20

// NewOpenAI returns a fake OpenAI-compatible upstream serving
// POST /v1/chat/completions and POST /v1/embeddings (and both without /v1, for
// clients whose base URL already ends in /v1). Other paths answer 404 and other
// methods 405, with OpenAI error bodies.
//
// It panics if opts.Fault.Status is set outside 400-599: that is a
// configuration bug, better caught at startup than as a broken response.
func NewOpenAI(opts Options) http.Handler {
	if s := opts.Fault.Status; s != 0 && (s < 400 || s > 599) {
		panic(fmt.Sprintf("fake: Options.Fault.Status %d outside 400-599", s))
	}
	return &openAI{opts: opts, cache: newPromptCache(opts.PromptCache)}
}

type openAI struct {
	opts  Options
	cache *promptCache // nil: no prompt caching
}

func (h *openAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the whole body before anything else: net/http only notices a
	// client hanging up (and cancels r.Context()) once the body is consumed,
	// and the delays below must end when the client leaves.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			apierror.TooLarge(maxBody).Write(w)
		}
		return // otherwise a broken upload: the client will not read an answer
	}

	f, ferr := parseFault(h.opts.Fault, r)
	// With prompt caching, a prompt whose prefix was seen answers sooner.
	var points []cachePoint
	cached := 0
	serviceTime := h.opts.ServiceTime
	if h.cache != nil && r.Method == http.MethodPost && !isEmbeddingsPath(r.URL.Path) {
		if req, aerr := parseChatRequest(body); aerr == nil {
			points = h.cache.openAIPoints(req, body)
			cached = h.cache.automatic(points)
			serviceTime = h.cache.serviceTime(serviceTime, cached, points[len(points)-1].tokens)
		}
	}
	// The wait comes before any answer so that it covers every response,
	// errors included: timeouts in front of the fake must fire whatever it
	// would say.
	if sleep(r.Context(), serviceTime+f.delay) != nil {
		return // the client is gone; nobody to answer
	}
	if ferr != nil {
		ferr.Write(w)
		return
	}

	embeddings := isEmbeddingsPath(r.URL.Path) // see embeddings.go
	if !embeddings && r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions" {
		apierror.NotFound(r.URL.Path).Write(w)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("allow", http.MethodPost)
		(&apierror.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("Method %s is not allowed for %s; use POST.", r.Method, r.URL.Path)}).Write(w)
		return
	}
	if aerr := h.authorize(r); aerr != nil {
		aerr.Write(w)
		return
	}
	if f.status != 0 {
		f.statusError().Write(w)
		return
	}
	if embeddings {
		h.embeddings(w, body)
		return
	}

	req, aerr := parseChatRequest(body)
	if aerr != nil {
		aerr.Write(w)
		return
	}

	rep := generate(req, body, f.chunks)
	if points != nil {
		h.cache.storeAutomatic(points)
		rep.cacheOn, rep.cachedTokens = true, cached
	}
	w.Header().Set("x-request-id", "req_"+rep.id[len("chatcmpl-"):])
	if req.Stream {
		h.stream(w, r, req, rep, f)
		return
	}
	writeCompletion(w, req, rep)
}

// authorize checks the bearer key when one is configured, with OpenAI's
// messages for a missing and a wrong key.
func (h *openAI) authorize(r *http.Request) *apierror.Error {
	if h.opts.APIKey == "" {
		return nil
	}
	auth := r.Header.Get("authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	switch {
	case auth == "" || (ok && key == ""):
		return apierror.InvalidAPIKey("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	case !ok || key != h.opts.APIKey:
		return apierror.InvalidAPIKey(fmt.Sprintf("Incorrect API key provided: %s.", redact(key)))
	}
	return nil
}

// redact keeps a key recognisable in an error without echoing it whole.
func redact(key string) string {
	if len(key) <= 8 {
		return strings.Repeat("*", len(key))
	}
	return key[:3] + "***" + key[len(key)-4:]
}
