package dataplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// localReplyConfig is a compiled local_reply_config. Envoy runs every local
// reply through it: the connection manager's and the router's (no route, an
// unreachable upstream, timeouts, 413), direct responses, and the ext_proc
// filter's immediate responses and failures. The first mapper whose filter
// matches rewrites the status, the body and the headers; the top-level
// body_format applies when no mapper matched or the mapper has no format of
// its own.
type localReplyConfig struct {
	mappers []*replyMapper
	format  *bodyFormat
}

type replyMapper struct {
	filter  replyFilter
	status  int    // 0: keep
	body    []byte // replaces the body when hasBody
	hasBody bool
	format  *bodyFormat
	headers []*corev3.HeaderValueOption
}

// replyInfo is what a mapper's filter and format read.
type replyInfo struct {
	status  int
	flags   []string // Envoy's response flags (NR, UF, UT, ...)
	details string   // the response code details
	headers headerMap
}

type replyFilter func(replyInfo) bool

// bodyFormat is a compiled SubstitutionFormatString.
type bodyFormat struct {
	json        *structpb.Struct
	text        string
	contentType string
}

// responseFlags maps the data plane's response details to the response
// flags Envoy sets for the same failure.
var responseFlags = map[string]string{
	"route_not_found":                        "NR",
	"cluster_not_found":                      "NC",
	"no_healthy_upstream":                    "UH",
	"upstream_connect_error":                 "UF",
	"upstream_reset_before_response_started": "UC",
	"upstream_request_timeout":               "UT",
	"upstream_per_try_timeout":               "UT",
	"stream_idle_timeout":                    "SI",
}

// validFlags are the response flag names Envoy's ResponseFlagFilter takes.
var validFlags = []string{"LH", "UH", "UT", "LR", "UR", "UF", "UC", "UO", "NR", "DI", "FI", "RL", "UAEX", "RLSE",
	"DC", "URX", "SI", "IH", "DPE", "UMSDR", "RFCF", "NFCF", "DT", "UPE", "NC", "OM", "DF", "DO", "DR", "UDO"}

func compileLocalReplyConfig(c *hcmv3.LocalReplyConfig) (*localReplyConfig, error) {
	out := &localReplyConfig{}
	for i, m := range c.GetMappers() {
		rm := &replyMapper{status: int(m.GetStatusCode().GetValue()), headers: m.GetHeadersToAdd()}
		var err error
		if rm.filter, err = compileReplyFilter(m.GetFilter()); err != nil {
			return nil, fmt.Errorf("mappers[%d].filter: %w", i, err)
		}
		if b := m.GetBody(); b != nil {
			if rm.body, err = readDataSource(b); err != nil {
				return nil, fmt.Errorf("mappers[%d].body: %w", i, err)
			}
			rm.hasBody = true
		}
		if f := m.GetBodyFormatOverride(); f != nil {
			if rm.format, err = compileBodyFormat(f); err != nil {
				return nil, fmt.Errorf("mappers[%d].body_format_override: %w", i, err)
			}
		}
		if _, err := compileHeaderOps(m.GetHeadersToAdd(), nil, nil, nil); err != nil {
			return nil, fmt.Errorf("mappers[%d].headers_to_add: %w", i, err)
		}
		out.mappers = append(out.mappers, rm)
	}
	if f := c.GetBodyFormat(); f != nil {
		var err error
		if out.format, err = compileBodyFormat(f); err != nil {
			return nil, fmt.Errorf("body_format: %w", err)
		}
	}
	return out, nil
}

// compileReplyFilter supports the access log filters a local reply can be
// told apart by; others are refused, as ignoring them would rewrite replies
// Envoy leaves alone.
func compileReplyFilter(f *accesslogv3.AccessLogFilter) (replyFilter, error) {
	switch s := f.GetFilterSpecifier().(type) {
	case *accesslogv3.AccessLogFilter_StatusCodeFilter:
		c := s.StatusCodeFilter.GetComparison()
		// The runtime key is never set here, so its default is the value.
		v := int(c.GetValue().GetDefaultValue())
		switch c.GetOp() {
		case accesslogv3.ComparisonFilter_EQ:
			return func(i replyInfo) bool { return i.status == v }, nil
		case accesslogv3.ComparisonFilter_GE:
			return func(i replyInfo) bool { return i.status >= v }, nil
		case accesslogv3.ComparisonFilter_LE:
			return func(i replyInfo) bool { return i.status <= v }, nil
		}
		return nil, fmt.Errorf("status_code_filter op %v is not supported", c.GetOp())
	case *accesslogv3.AccessLogFilter_ResponseFlagFilter:
		want := s.ResponseFlagFilter.GetFlags()
		for _, fl := range want {
			if !slices.Contains(validFlags, fl) {
				return nil, fmt.Errorf("unknown response flag %q", fl)
			}
		}
		return func(i replyInfo) bool {
			if len(want) == 0 {
				return len(i.flags) > 0
			}
			for _, fl := range i.flags {
				if slices.Contains(want, fl) {
					return true
				}
			}
			return false
		}, nil
	case *accesslogv3.AccessLogFilter_NotHealthCheckFilter:
		return func(replyInfo) bool { return true }, nil // no health checks reach this data plane
	case *accesslogv3.AccessLogFilter_HeaderFilter:
		hm, err := compileHeaderMatcher(s.HeaderFilter.GetHeader())
		if err != nil {
			return nil, err
		}
		return func(i replyInfo) bool { return hm.matches(i.headers) }, nil
	case *accesslogv3.AccessLogFilter_AndFilter, *accesslogv3.AccessLogFilter_OrFilter:
		var parts []*accesslogv3.AccessLogFilter
		and := false
		if a, ok := s.(*accesslogv3.AccessLogFilter_AndFilter); ok {
			parts, and = a.AndFilter.GetFilters(), true
		} else {
			parts = s.(*accesslogv3.AccessLogFilter_OrFilter).OrFilter.GetFilters()
		}
		var fs []replyFilter
		for _, p := range parts {
			pf, err := compileReplyFilter(p)
			if err != nil {
				return nil, err
			}
			fs = append(fs, pf)
		}
		return func(i replyInfo) bool {
			for _, f := range fs {
				if f(i) != and {
					return !and
				}
			}
			return and
		}, nil
	case nil:
		return nil, errors.New("no filter")
	default:
		return nil, fmt.Errorf("filter %T is not supported", s)
	}
}

// Command operators the data plane can render in a local reply body.
var replyCommands = []string{"%LOCAL_REPLY_BODY%", "%RESPONSE_CODE%", "%RESPONSE_CODE_DETAILS%", "%RESPONSE_FLAGS%"}

func compileBodyFormat(f *corev3.SubstitutionFormatString) (*bodyFormat, error) {
	if len(f.GetFormatters()) > 0 {
		return nil, errors.New("formatter extensions are not supported")
	}
	out := &bodyFormat{contentType: f.GetContentType()}
	switch v := f.GetFormat().(type) {
	case *corev3.SubstitutionFormatString_JsonFormat:
		if err := checkFormatStruct(v.JsonFormat); err != nil {
			return nil, err
		}
		out.json = v.JsonFormat
		if out.contentType == "" {
			out.contentType = "application/json"
		}
	case *corev3.SubstitutionFormatString_TextFormat:
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		out.text = v.TextFormat
	case *corev3.SubstitutionFormatString_TextFormatSource:
		b, err := readDataSource(v.TextFormatSource)
		if err != nil {
			return nil, err
		}
		out.text = string(b)
	default:
		return nil, fmt.Errorf("format %T is not supported", v)
	}
	if out.json == nil {
		if err := checkCommands(out.text); err != nil {
			return nil, err
		}
		if out.contentType == "" {
			out.contentType = "text/plain"
		}
	}
	return out, nil
}

// checkFormatStruct applies Envoy's json_format rules (strings, numbers,
// lists and structs only) and the data plane's command operators.
func checkFormatStruct(s *structpb.Struct) error {
	for k, v := range s.GetFields() {
		if err := checkFormatValue(v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func checkFormatValue(v *structpb.Value) error {
	switch kind := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return checkCommands(kind.StringValue)
	case *structpb.Value_NumberValue:
		return nil
	case *structpb.Value_StructValue:
		return checkFormatStruct(kind.StructValue)
	case *structpb.Value_ListValue:
		for _, e := range kind.ListValue.GetValues() {
			if err := checkFormatValue(e); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("json_format values must be strings, numbers, lists or structs, not %T", v.GetKind())
}

func checkCommands(s string) error {
	for {
		i := strings.IndexByte(s, '%')
		if i < 0 {
			return nil
		}
		j := strings.IndexByte(s[i+1:], '%')
		if j < 0 {
			return nil // a lone % is literal
		}
		cmd := s[i : i+j+2]
		if !slices.Contains(replyCommands, cmd) {
			return fmt.Errorf("command %s is not supported (only %v)", cmd, replyCommands)
		}
		s = s[i+j+2:]
	}
}

func (i replyInfo) command(cmd string, body []byte) string {
	switch cmd {
	case "%LOCAL_REPLY_BODY%":
		return string(body)
	case "%RESPONSE_CODE%":
		return strconv.Itoa(i.status)
	case "%RESPONSE_CODE_DETAILS%":
		return i.details
	case "%RESPONSE_FLAGS%":
		if len(i.flags) == 0 {
			return "-"
		}
		return strings.Join(i.flags, ",")
	}
	return cmd
}

func (i replyInfo) substitute(s string, body []byte) string {
	for _, cmd := range replyCommands {
		if strings.Contains(s, cmd) {
			s = strings.ReplaceAll(s, cmd, i.command(cmd, body))
		}
	}
	return s
}

// render formats the body. Envoy's JSON formatter writes the keys sorted and
// ends the line with a newline; a value that is only %RESPONSE_CODE% stays a
// number.
func (f *bodyFormat) render(i replyInfo, body []byte) []byte {
	if f.json == nil {
		return []byte(i.substitute(f.text, body))
	}
	var conv func(v *structpb.Value) any
	conv = func(v *structpb.Value) any {
		switch kind := v.GetKind().(type) {
		case *structpb.Value_StringValue:
			if kind.StringValue == "%RESPONSE_CODE%" {
				return i.status
			}
			return i.substitute(kind.StringValue, body)
		case *structpb.Value_NumberValue:
			return kind.NumberValue
		case *structpb.Value_StructValue:
			m := map[string]any{}
			for k, fv := range kind.StructValue.GetFields() {
				m[k] = conv(fv)
			}
			return m
		case *structpb.Value_ListValue:
			var l []any
			for _, e := range kind.ListValue.GetValues() {
				l = append(l, conv(e))
			}
			return l
		}
		return nil
	}
	out, err := json.Marshal(conv(structpb.NewStructValue(f.json)))
	if err != nil { // cannot happen: strings, numbers, maps and slices only
		return body
	}
	return append(out, '\n')
}

// mapLocalReply runs a local reply through the connection manager's
// local_reply_config, as Envoy does, and returns the headers and body to
// send. It records the reply's response flags for the access log.
func (s *requestState) mapLocalReply(h headerMap, body []byte) (headerMap, []byte) {
	if f := responseFlags[s.detail]; f != "" {
		s.flags = []string{f}
	}
	if s.retriesExhausted && !slices.Contains(s.flags, "URX") {
		s.flags = append(s.flags, "URX")
	}
	lr := s.lis.hcm.localReply
	if lr == nil {
		return h, body
	}
	status, _ := strconv.Atoi(h.value(hdrStatus))
	info := replyInfo{status: status, flags: s.flags, details: s.detail, headers: s.headers}
	format := lr.format
	var matched *replyMapper
	for _, m := range lr.mappers {
		if m.filter(info) {
			matched = m
			break
		}
	}
	if matched != nil {
		if matched.status != 0 {
			info.status = matched.status
			h.set(hdrStatus, strconv.Itoa(matched.status))
		}
		if matched.hasBody {
			body = matched.body
		}
		if matched.format != nil {
			format = matched.format
		}
	}
	if format != nil {
		body = format.render(info, body)
		h.set("content-type", format.contentType)
	}
	if matched != nil {
		applyHeaderOptions(&h, matched.headers)
	}
	h.set("content-length", strconv.Itoa(len(body)))
	return h, body
}
