package dataplane

import (
	"strconv"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func statusIs(op accesslogv3.ComparisonFilter_Op, v uint32) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{
		StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: &accesslogv3.ComparisonFilter{
			Op: op, Value: &corev3.RuntimeUInt32{DefaultValue: v, RuntimeKey: "k"},
		}},
	}}
}

func flagsAre(flags ...string) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
		ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: flags},
	}}
}

func TestReplyFilters(t *testing.T) {
	info := func(status int, flags ...string) replyInfo {
		return replyInfo{status: status, flags: flags, headers: headerMap{{"x-debug", "1"}}}
	}
	and := func(fs ...*accesslogv3.AccessLogFilter) *accesslogv3.AccessLogFilter {
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: fs}}}
	}
	or := func(fs ...*accesslogv3.AccessLogFilter) *accesslogv3.AccessLogFilter {
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{OrFilter: &accesslogv3.OrFilter{Filters: fs}}}
	}
	header := &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_HeaderFilter{HeaderFilter: &accesslogv3.HeaderFilter{
		Header: &routev3.HeaderMatcher{Name: "x-debug", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}},
	}}}
	tests := []struct {
		name   string
		filter *accesslogv3.AccessLogFilter
		in     replyInfo
		want   bool
	}{
		{"status EQ", statusIs(accesslogv3.ComparisonFilter_EQ, 413), info(413), true},
		{"status EQ other", statusIs(accesslogv3.ComparisonFilter_EQ, 413), info(404), false},
		{"status GE", statusIs(accesslogv3.ComparisonFilter_GE, 500), info(503), true},
		{"status LE", statusIs(accesslogv3.ComparisonFilter_LE, 499), info(503), false},
		{"flag listed", flagsAre("UF", "UH"), info(503, "UH"), true},
		{"flag not listed", flagsAre("UF"), info(503, "UH"), false},
		{"no flag on the reply", flagsAre("UF"), info(503), false},
		{"empty list: any flag", flagsAre(), info(503, "NC"), true},
		{"empty list: no flag", flagsAre(), info(503), false},
		{"and", and(flagsAre("SI"), statusIs(accesslogv3.ComparisonFilter_EQ, 408)), info(408, "SI"), true},
		{"and, one false", and(flagsAre("SI"), statusIs(accesslogv3.ComparisonFilter_EQ, 408)), info(504, "SI"), false},
		{"or", or(flagsAre("UF"), statusIs(accesslogv3.ComparisonFilter_EQ, 504)), info(504), true},
		{"or, none", or(flagsAre("UF"), statusIs(accesslogv3.ComparisonFilter_EQ, 504)), info(503), false},
		{"request header", header, info(200), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := compileReplyFilter(tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := f(tt.in); got != tt.want {
				t.Errorf("match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLocalReplyConfigRefusesWhatItCannotHonour(t *testing.T) {
	json := func(s *structpb.Struct) *corev3.SubstitutionFormatString {
		return &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: s}}
	}
	tests := []struct {
		name string
		m    *hcmv3.ResponseMapper
		want string
	}{
		{"duration filter", &hcmv3.ResponseMapper{Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_DurationFilter{
			DurationFilter: &accesslogv3.DurationFilter{}}}}, "not supported"},
		{"unknown flag", &hcmv3.ResponseMapper{Filter: flagsAre("XX")}, `unknown response flag "XX"`},
		{"unsupported command", &hcmv3.ResponseMapper{Filter: flagsAre("UF"), BodyFormatOverride: &corev3.SubstitutionFormatString{
			//lint:ignore SA1019 covers a deprecated Envoy field that Envoy, and so the data plane, still honours
			Format: &corev3.SubstitutionFormatString_TextFormat{TextFormat: "%REQ(:PATH)%"}}}, "%REQ(:PATH)%"},
		{"boolean in json_format", &hcmv3.ResponseMapper{Filter: flagsAre("UF"),
			BodyFormatOverride: json(&structpb.Struct{Fields: map[string]*structpb.Value{"ok": structpb.NewBoolValue(true)}})}, "BoolValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileLocalReplyConfig(&hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{tt.m}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestMapLocalReply(t *testing.T) {
	lrc := &hcmv3.LocalReplyConfig{
		Mappers: []*hcmv3.ResponseMapper{
			{
				Filter:     flagsAre("UF"),
				StatusCode: wrapperspb.UInt32(502),
				BodyFormatOverride: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{
					JsonFormat: &structpb.Struct{Fields: map[string]*structpb.Value{
						"code":   structpb.NewStringValue("%RESPONSE_CODE%"),
						"detail": structpb.NewStringValue("upstream: %RESPONSE_CODE_DETAILS% (%RESPONSE_FLAGS%)"),
						"n":      structpb.NewNumberValue(7),
					}},
				}},
				HeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-mapped", Value: "yes"}}},
			},
			{Filter: statusIs(accesslogv3.ComparisonFilter_EQ, 404), Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "gone"}}},
		},
		//lint:ignore SA1019 covers a deprecated Envoy field that Envoy, and so the data plane, still honours
		BodyFormat: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormat{TextFormat: "[%LOCAL_REPLY_BODY%]"}},
	}
	lr, err := compileLocalReplyConfig(lrc)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, detail string
		status       string
		body         string
		wantStatus   string
		wantBody     string
		wantType     string
	}{
		{"json mapper with status override", "upstream_connect_error", "503", "x",
			"502", `{"code":502,"detail":"upstream: upstream_connect_error (UF)","n":7}` + "\n", "application/json"},
		{"body replaced, top-level format", "route_not_found_elsewhere", "404", "x", "404", "[gone]", "text/plain"},
		{"no mapper: top-level format only", "direct_response", "401", "denied", "401", "[denied]", "text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &requestState{lis: &listenerConfig{hcm: &hcmConfig{localReply: lr}}, detail: tt.detail}
			h, body := s.mapLocalReply(headerMap{{hdrStatus, tt.status}, {"content-type", "text/html"}}, []byte(tt.body))
			if h.value(hdrStatus) != tt.wantStatus || string(body) != tt.wantBody || h.value("content-type") != tt.wantType {
				t.Errorf("got %s %q %s, want %s %q %s", h.value(hdrStatus), body, h.value("content-type"), tt.wantStatus, tt.wantBody, tt.wantType)
			}
			if h.value("content-length") != strconv.Itoa(len(body)) {
				t.Errorf("content-length %s for %d bytes", h.value("content-length"), len(body))
			}
		})
	}
	s := &requestState{lis: &listenerConfig{hcm: &hcmConfig{localReply: lr}}, detail: "upstream_connect_error"}
	h, _ := s.mapLocalReply(headerMap{{hdrStatus, "503"}}, nil)
	if h.value("x-mapped") != "yes" {
		t.Error("mapper headers_to_add not applied")
	}
	// Without a local_reply_config the reply is left alone (flags are still
	// recorded for the access log).
	s = &requestState{lis: &listenerConfig{hcm: &hcmConfig{}}, detail: "no_healthy_upstream"}
	if h, body := s.mapLocalReply(headerMap{{hdrStatus, "503"}}, []byte("b")); string(body) != "b" || h.value(hdrStatus) != "503" || s.flags[0] != "UH" {
		t.Errorf("unmapped reply changed: %v %q flags %v", h, body, s.flags)
	}
}
