package controlplane

import (
	"fmt"
	"math"
	"net"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	reqwithoutqueryv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/formatter/req_without_query/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

const (
	// RequestHeadersTimeout bounds how long a client may take to send its
	// request headers, so idle half-open connections cannot pile up.
	RequestHeadersTimeout = 30 * time.Second
	// RateLimitTimeout bounds each call of the ratelimit filter. The filter
	// only charges usage when a stream ends (admission is extproc's call), so
	// nothing waits on it; a generous bound keeps charges from being dropped
	// by a briefly slow Redis.
	RateLimitTimeout = time.Second
)

// AccessLogFormat is the access log line of every request, as Envoy's
// json_format: the outcome and the metadata extproc writes, never a header
// value (authorization least of all), a query string or body content.
var AccessLogFormat = map[string]string{
	"start_time":            "%START_TIME%",
	"request_id":            "%REQ(X-REQUEST-ID)%",
	"method":                "%REQ(:METHOD)%",
	"path":                  "%REQ_WITHOUT_QUERY(:PATH)%",
	"protocol":              "%PROTOCOL%",
	"status":                "%RESPONSE_CODE%",
	"response_flags":        "%RESPONSE_FLAGS%",
	"response_code_details": "%RESPONSE_CODE_DETAILS%",
	"duration_ms":           "%DURATION%",
	"bytes_received":        "%BYTES_RECEIVED%",
	"bytes_sent":            "%BYTES_SENT%",
	"upstream_cluster":      "%UPSTREAM_CLUSTER%",
	"upstream_host":         "%UPSTREAM_HOST%",
	"key_id":                "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":key_id)%",
	"tier":                  "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":tier)%",
	// Backends' calls: origin batch or responses, and a batch line's owner
	// (its key_id is left out so the line is not charged; ratelimit-design).
	"origin":            "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":origin)%",
	"owner":             "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":owner)%",
	"model":             "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":model)%",
	"provider":          "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":provider)%",
	"prompt_tokens":     "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":prompt_tokens)%",
	"completion_tokens": "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":completion_tokens)%",
	"total_tokens":      "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":total_tokens)%",
	"cached_tokens":     "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":cached_tokens)%",
}

// ExtProcProcessingMode is the ext_proc filter's processing mode. Headers are
// sent so extproc can authenticate before the body arrives; the request body
// is BUFFERED so extproc can route on the model in it (its body reply sets
// catalog.RouteHeader with clear_route_cache). The response body mode is
// switched per response with mode_override (SSE: STREAMED, JSON: BUFFERED).
func ExtProcProcessingMode() *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
		ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
		RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
}

func buildListener(cfg *config.Config, l config.Listener) (*listenerv3.Listener, *tlsv3.Secret, error) {
	fail := func(err error) (*listenerv3.Listener, *tlsv3.Secret, error) {
		return nil, nil, fmt.Errorf("controlplane: listener %q: %w", l.Name, err)
	}
	h, p, err := net.SplitHostPort(l.Address)
	if err != nil {
		return fail(err)
	}
	host, err := listenHost(h)
	if err != nil {
		return fail(err)
	}
	port, err := parsePort(p)
	if err != nil {
		return fail(err)
	}
	// The buffer limit is what lets ext_proc see whole request bodies in
	// BUFFERED mode, and what answers 413 beyond them: a 1M-token prompt is
	// about 4 MB of text, JSON escaping and non-ASCII text can double that
	// and images add more, so the default is 32 MiB (config/default.yaml)
	// instead of Envoy's 1 MiB. Envoy applies it to each HTTP/2 stream too.
	limit := cfg.Limits.MaxRequestBodyBytes
	if limit <= 0 || limit > math.MaxUint32 {
		return fail(fmt.Errorf("max_request_body_bytes %d does not fit per_connection_buffer_limit_bytes", limit))
	}
	hcm := buildHCM(cfg, l.Name)
	chain := &listenerv3.FilterChain{
		Filters: []*listenerv3.Filter{{
			Name:       FilterHTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}},
	}
	var secret *tlsv3.Secret
	if l.TLS != nil {
		secret = &tlsv3.Secret{
			Name: SecretName(l.Name),
			Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: l.TLS.CertFile}},
				PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: l.TLS.KeyFile}},
			}},
		}
		// The certificate travels over SDS rather than inline so a rotated
		// certificate is a secret update, not a listener drain.
		downstream := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{
				Name:      secret.Name,
				SdsConfig: adsConfigSource(),
			}},
			TlsParams: &tlsv3.TlsParameters{
				TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
				// TLS 1.2 with forward secrecy and an AEAD only; Envoy's
				// default list also offers CBC suites.
				CipherSuites: ListenerCipherSuites,
			},
			AlpnProtocols: []string{"h2", "http/1.1"},
		}}
		chain.TransportSocket = &corev3.TransportSocket{
			Name:       TransportSocketTLS,
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(downstream)},
		}
	}
	lis := &listenerv3.Listener{
		Name:                          l.Name,
		Address:                       socketAddress(host, port),
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(uint32(limit)),
		FilterChains:                  []*listenerv3.FilterChain{chain},
	}
	return lis, secret, nil
}

// ListenerCipherSuites are the TLS 1.2 suites a listener offers: ECDHE with
// AES-GCM or ChaCha20-Poly1305 (TLS 1.3's are all AEAD).
var ListenerCipherSuites = []string{
	"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
	"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
}

// buildHCM is the connection manager of every listener: [ext_proc,
// ratelimit, router] on the shared route configuration.
func buildHCM(cfg *config.Config, statPrefix string) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: catalog.ListenerRouteConfig,
		}},
		// Envoy's default has no limit at all on an idle stream; SSE streams
		// are long but never silent for minutes.
		StreamIdleTimeout:     durationpb.New(cfg.Limits.StreamIdleTimeout),
		RequestHeadersTimeout: durationpb.New(RequestHeadersTimeout),
		GenerateRequestId:     wrapperspb.Bool(true),
		// OpenAI clients read x-request-id from every response.
		AlwaysSetRequestIdInResponse: true,
		// Envoy is the edge: the client address is the peer's, and
		// x-forwarded-for / x-forwarded-proto from clients are not trusted.
		UseRemoteAddress: wrapperspb.Bool(true),
		LocalReplyConfig: LocalReplyConfig(cfg),
		AccessLog:        []*accesslogv3.AccessLog{accessLog()},
		// Order matters: ext_proc must run before the router picks a route,
		// the ratelimit filter charges usage once the stream is done, and
		// the router must be last.
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: FilterExtProc, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(extProcFilter(cfg))}},
			{Name: FilterRateLimit, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(rateLimitFilter())}},
			{Name: FilterRouter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
}

func extProcFilter(cfg *config.Config) *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: catalog.ExtProcCluster,
			}},
			// Envoy bounds each ext_proc message with message_timeout and puts
			// no deadline on the stream from this field; it mirrors the message
			// timeout so a consumer that does read it cannot cut a request short
			// of what message_timeout allows.
			Timeout: durationpb.New(cfg.Limits.ExtProcMessageTimeout),
		},
		// Fail closed: extproc authenticates and meters requests, so letting
		// them through unprocessed would serve unauthenticated traffic.
		FailureModeAllow: false,
		ProcessingMode:   ExtProcProcessingMode(),
		// The default of 200 ms is too short for a 32 MiB body.
		MessageTimeout:    durationpb.New(cfg.Limits.ExtProcMessageTimeout),
		AllowModeOverride: true,
		// Re-match the route after every reply that mutates headers, not only
		// when the reply asks: the request-headers reply strips the
		// x-switchyard-* headers a client sent, and a route matched on a
		// forged routing header must not survive that.
		RouteCacheAction: extprocv3.ExternalProcessor_CLEAR,
		// Dynamic metadata in any namespace not listed here is dropped.
		MetadataOptions: &extprocv3.MetadataOptions{
			ReceivingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{
				Untyped: []string{catalog.MetadataNamespace},
			},
		},
	}
}

// rateLimitFilter charges token usage to envoyproxy/ratelimit when a model
// stream ends (docs/ratelimit-design.md). Admission is extproc's: the model
// routes carry only apply_on_stream_done limits, so this filter makes no call
// on the request path.
func rateLimitFilter() *ratelimitv3.RateLimit {
	return &ratelimitv3.RateLimit{
		Domain:  ratelimit.Domain,
		Timeout: durationpb.New(RateLimitTimeout),
		// Fail open: a charge that cannot be made must not fail a request
		// whose response has already been sent; extproc's admission call
		// decides what an unreachable limiter means for each tier.
		FailureModeDeny: false,
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: RateLimitCluster},
			}},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
		// Extproc sets the x-ratelimit-* headers from its admission answer.
		EnableXRatelimitHeaders:        ratelimitv3.RateLimit_OFF,
		DisableXEnvoyRatelimitedHeader: true,
	}
}

func accessLog() *accesslogv3.AccessLog {
	fields := make(map[string]*structpb.Value, len(AccessLogFormat))
	for k, v := range AccessLogFormat {
		fields[k] = structpb.NewStringValue(v)
	}
	return &accesslogv3.AccessLog{
		Name: AccessLoggerStdout,
		ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(&streamv3.StdoutAccessLog{
			AccessLogFormat: &streamv3.StdoutAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
				Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{Fields: fields}},
				Formatters: []*corev3.TypedExtensionConfig{{
					Name:        FormatterReqWithoutQuery,
					TypedConfig: mustAny(&reqwithoutqueryv3.ReqWithoutQuery{}),
				}},
			}},
		})},
	}
}
