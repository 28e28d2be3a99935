// Package extproc owns Switchyard's Envoy external-processing (ext_proc)
// server: authentication, request body parsing and validation, routing,
// provider credentials, and usage accounting.
//
// Envoy (or Switchyard's own data plane, which mimics it) opens one
// bidirectional Process stream per HTTP request and sends the request
// headers, the buffered request body, the response headers and, when asked
// for, the response body. The filter is configured with request headers
// SEND, request body BUFFERED, response headers SEND, response body NONE,
// trailers SKIP, allow_mode_override and fail-closed; this package relies on
// exactly that.
//
// For POST /v1/chat/completions:
//
//   - request headers: every client header named x-switchyard-* is removed so
//     routing and identity headers cannot be forged, the bearer key is
//     checked, and the client's authorization header is removed so it never
//     reaches a provider.
//   - request body: the JSON is validated in one pass without decoding it,
//     the model is resolved in the catalog (and checked against the key's
//     model allow-list), the request is admitted by the rate limiter
//     (limits.go: requests per minute counted, tokens per minute checked
//     against a prompt estimate; 429 otherwise), "model" is rewritten to the
//     provider's upstream name, streaming requests are made to ask for a
//     usage chunk, and the reply sets the route header
//     (catalog.RouteHeader) with clear_route_cache so Envoy re-routes to the
//     provider's cluster, plus the provider's credential.
//   - response headers: JSON bodies are switched to BUFFERED and event
//     streams to STREAMED so token usage can be read, and the admission's
//     x-ratelimit-* headers are set.
//   - response body: usage is recorded, published as dynamic metadata in
//     catalog.MetadataNamespace, the usage chunk the gateway asked for on
//     the client's behalf is cut out again, and provider errors that are not
//     OpenAI-shaped are replaced by ones that are.
//
// Every error a client sees is an *apierror.Error sent as an
// ImmediateResponse. Request and response contents and keys are never
// logged.
package extproc
