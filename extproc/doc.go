// Package extproc owns Switchyard's Envoy external-processing (ext_proc)
// server: authentication, request body parsing and validation, the choice of
// provider, per-attempt translation to each provider's wire format, and usage
// accounting.
//
// Envoy (or Switchyard's own data plane, which mimics it) runs this server in
// two places, told apart by the gRPC initial metadata of the Process stream
// (catalog.PhaseMetadata):
//
//   - downstream: the listener's filter, one stream per client request,
//     configured with request headers SEND, request body BUFFERED, response
//     headers SEND, response body NONE, trailers SKIP, allow_mode_override
//     and fail-closed. It decides what is asked and where to start.
//   - upstream: the filter on each provider cluster, one stream per attempt
//     (catalog.PhaseUpstream, with catalog.ProviderMetadata naming the
//     provider), so a failover retry to another provider is translated for
//     that provider (upstream.go).
//
// Downstream, for POST /v1/chat/completions and POST /v1/embeddings:
//
//   - request headers: every client header named x-switchyard-* is removed so
//     routing and identity headers cannot be forged, the bearer key is
//     checked, and the client's authorization header is removed so it never
//     reaches a provider.
//   - request body: the JSON is validated in one pass without decoding it
//     (jsonscan.go), which also finds the members the gateway reads and
//     counts the prompt for the token estimate, the model is resolved in
//     the catalog (and checked against the key's model allow-list and the
//     model's capabilities), embeddings inputs over the model's context
//     window are truncated (embeddings.go), the request is admitted by the
//     rate limiter (limits.go: requests per minute counted, tokens per
//     minute checked against a prompt estimate; 429 otherwise), streaming
//     requests are made to ask for a usage chunk, and the reply sets the
//     route headers (catalog.RouteHeader, and catalog.FirstHeader for the
//     provider the model's routing policy prefers, policy.go) with
//     clear_route_cache so the data plane re-routes onto the model's
//     clusters. The body stays in OpenAI's format; when the first choice
//     is an OpenAI-compatible provider it already carries that provider's
//     upstream model, and x-switchyard-prepared names the provider, so that
//     the first attempt's upstream phase can skip the body (request.go,
//     route; upstream.go). Edits to a body are made in place when its
//     buffer has room, as a gRPC message's nearly always has.
//   - response headers: JSON bodies are switched to BUFFERED and event
//     streams to STREAMED so token usage can be read, and the admission's
//     x-ratelimit-* headers are set.
//   - response body: usage is recorded, published as dynamic metadata in
//     catalog.MetadataNamespace, the usage chunk the gateway asked for on
//     the client's behalf is cut out again, and provider errors that are not
//     OpenAI-shaped are replaced by ones that are. The upstream phase has
//     already turned every provider's answer into OpenAI's format.
//
// GET /v1/models and GET /v1/models/{id} are answered downstream, at the
// request headers, from the catalog (models.go).
//
// Every error a client sees is an *apierror.Error sent as an
// ImmediateResponse. Request and response contents and keys are never
// logged.
package extproc
