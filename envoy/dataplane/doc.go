// Package dataplane owns the single-node data plane: listeners, route
// matching, the ext_proc client, and proxying to provider clusters.
//
// Envoy cannot run on every machine Switchyard runs on, so this package is a
// small HTTP proxy that consumes the same xDS resources Envoy would (Listener,
// RouteConfiguration, Cluster, ClusterLoadAssignment and Secret) and speaks
// envoy.service.ext_proc.v3 to the ext_proc server over real gRPC, with
// Envoy's semantics: one Process stream per request, opened lazily; header and
// body phases in Envoy's order; Envoy's header mutation rules; route cache
// clearing only alongside a header mutation; mode overrides only in replies to
// header messages; dynamic metadata only for receiving namespaces; and
// Envoy's status codes for timeouts, gRPC errors and spurious replies.
//
// Envoy's local replies that the router or the connection manager generate
// (direct responses, no route, upstream failures, 413) travel through the
// ext_proc filter's response path exactly as they do in Envoy; the replies the
// ext_proc filter itself generates (immediate responses, processor failures)
// do not, because processing is complete by then. Every local reply, the
// ext_proc filter's included, is rewritten by the connection manager's
// local_reply_config as Envoy does (mappers on status and response flags;
// the data plane sets the flag Envoy would, such as UF or NR), so the
// control plane's OpenAI-shaped mappers apply on both data planes.
//
// The ratelimit filter (envoy.filters.http.ratelimit) and its per-route
// RateLimitPerRoute are parsed (ratelimitconfig.go) and charge usage when a
// stream ends (ratelimit.go). Upstream certificates are checked against
// trusted_ca and, when the cluster lists them, match_typed_subject_alt_names.
//
// The router implements what the control plane generates for failover
// (attempt.go, failover.go): envoy.clusters.aggregate clusters, whose
// priorities are their members' in order; route and virtual host retry
// policies (retry_on connect-failure, reset, 5xx, gateway-error,
// retriable-4xx, retriable-status-codes; num_retries; per_try_timeout until
// the response headers; Envoy's jittered back-off; the previous_hosts
// predicate and the previous_priorities retry priority), never retrying
// once the response has started downstream; outlier detection's
// consecutive 5xx, gateway-failure and failure-percentage detectors with
// Envoy's ejection times and max_ejection_percent, kept across
// configuration updates (a reset after the response head counts, as in
// Envoy's router); the healthy panic threshold;
// and a cluster's upstream HTTP filters (HttpProtocolOptions.http_filters:
// ext_proc, then upstream_codec), run once per attempt on the attempt's
// copy of the request, with the response passing through them before the
// router decides whether to retry.
//
// Configuration is applied atomically: each request keeps the configuration
// it started with until it ends. Settings Envoy would honour but this data
// plane does not implement are refused by Apply when ignoring them would
// change what a request sees (unsupported filters, body modes, cluster
// types, retry conditions), and logged when they only change resilience
// (circuit breakers, active health checks, outlier detection's
// success-rate detector).
package dataplane
