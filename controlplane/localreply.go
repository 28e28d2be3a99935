package controlplane

import (
	"fmt"
	"net/http"
	"strconv"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// LocalReply is one kind of reply Envoy generates itself (no route, an
// upstream it cannot reach, a timeout, a body over the buffer limit), and the
// OpenAI error it is rewritten to, so clients never see Envoy's plain-text
// bodies.
//
// Envoy runs every local reply through local_reply_config, including
// extproc's immediate responses and direct responses. Matching on status
// alone would rewrite extproc's own errors (its 404 model_not_found, its 503
// when the key store is down), so most replies are matched on the response
// flag that only Envoy's own failure sets. Status alone is used only for
// statuses extproc never sends (408, 413, 504) and for 500, whose only
// extproc use is the same generic message.
type LocalReply struct {
	// Flags, when set, match a reply carrying any of these response flags.
	Flags []string
	// Status, when set, matches a reply with this status (and the flags).
	Status uint32
	// Error is the body; its Status is informational (the status is kept).
	Error apierror.Error
}

// LocalReplies lists the mappers in match order (first match wins).
func LocalReplies(cfg *config.Config) []LocalReply {
	server := func(code, msg string) apierror.Error {
		return apierror.Error{Type: apierror.TypeServer, Code: code, Message: msg}
	}
	tooLarge := apierror.TooLarge(cfg.Limits.MaxRequestBodyBytes)
	return []LocalReply{
		{Flags: []string{"NR"}, Error: apierror.Error{Type: apierror.TypeInvalidRequest, Code: "unknown_url",
			Message: "Unrecognized request URL. Please see https://platform.openai.com/docs/api-reference."}},
		{Flags: []string{"NC"}, Error: server("cluster_not_found", "The route's upstream cluster does not exist.")},
		{Flags: []string{"UH"}, Error: server("no_healthy_upstream", "No upstream is available.")},
		{Flags: []string{"UF"}, Error: server("upstream_connect_error", "The gateway could not connect to the upstream.")},
		{Flags: []string{"UO"}, Error: server("upstream_overflow", "The upstream is at capacity. Please retry shortly.")},
		{Flags: []string{"UC", "UR"}, Error: server("upstream_reset_before_response_started", "The upstream closed the connection before responding.")},
		{Flags: []string{"URX"}, Error: server("upstream_retry_limit_exceeded", "Every attempt to reach the upstream failed.")},
		{Flags: []string{"UT"}, Error: server("upstream_request_timeout", "The upstream did not respond in time.")},
		{Flags: []string{"SI"}, Status: http.StatusRequestTimeout, Error: apierror.Error{Type: apierror.TypeInvalidRequest,
			Code: "stream_idle_timeout", Message: "The request body was not received in time."}},
		{Flags: []string{"SI"}, Error: server("stream_idle_timeout", "The upstream did not respond in time.")},
		{Status: http.StatusRequestEntityTooLarge, Error: apierror.Error{Type: apierror.TypeInvalidRequest,
			Code: tooLarge.Code, Message: tooLarge.Message}},
		{Status: http.StatusRequestTimeout, Error: apierror.Error{Type: apierror.TypeInvalidRequest,
			Code: "request_timeout", Message: "The request was not received in time."}},
		{Status: http.StatusGatewayTimeout, Error: server("gateway_timeout", "The request timed out in the gateway.")},
		{Status: http.StatusInternalServerError, Error: server("server_error", "The gateway could not process the request.")},
	}
}

// LocalReplyConfig is the connection manager's local_reply_config built from
// LocalReplies: each mapper replaces the body with the OpenAI error, rendered
// by apierror like every other error the gateway sends, and sent as JSON.
//
// The body is a literal sent through text_format "%LOCAL_REPLY_BODY%" rather
// than a json_format: Envoy's json_format cannot produce null, and the
// official OpenAI schema requires "param" (null when there is none).
func LocalReplyConfig(cfg *config.Config) *hcmv3.LocalReplyConfig {
	lrc := &hcmv3.LocalReplyConfig{}
	for _, r := range LocalReplies(cfg) {
		lrc.Mappers = append(lrc.Mappers, &hcmv3.ResponseMapper{
			Filter: r.filter(),
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(r.Error.JSON())}},
			BodyFormatOverride: &corev3.SubstitutionFormatString{
				// text_format_source, not the deprecated text_format.
				Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
					Specifier: &corev3.DataSource_InlineString{InlineString: "%LOCAL_REPLY_BODY%"}}},
				ContentType: "application/json",
			},
		})
	}
	return lrc
}

func (r LocalReply) filter() *accesslogv3.AccessLogFilter {
	var parts []*accesslogv3.AccessLogFilter
	if len(r.Flags) > 0 {
		parts = append(parts, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
			ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: r.Flags},
		}})
	}
	if r.Status != 0 {
		parts = append(parts, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{
			StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: &accesslogv3.ComparisonFilter{
				Op: accesslogv3.ComparisonFilter_EQ,
				Value: &corev3.RuntimeUInt32{
					DefaultValue: r.Status,
					// Required by the API; nobody sets it, so the default holds.
					RuntimeKey: "switchyard.local_reply." + strconv.Itoa(int(r.Status)),
				},
			}},
		}})
	}
	switch len(parts) {
	case 0:
		panic(fmt.Sprintf("controlplane: local reply %q matches everything", r.Error.Code))
	case 1:
		return parts[0]
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{
		AndFilter: &accesslogv3.AndFilter{Filters: parts},
	}}
}
