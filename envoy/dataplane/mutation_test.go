package dataplane

import (
	"errors"
	"net/http"
	"net/textproto"
	"reflect"
	"testing"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestApplyHeaderMutation(t *testing.T) {
	base := func() headerMap {
		return headerMap{
			{":authority", "gw.example"}, {":path", "/v1/chat"}, {":method", "POST"}, {":scheme", "https"},
			{"host", "gw.example"}, {"x-foo", "1"}, {"x-envoy-original", "a"},
		}
	}
	opt := func(k, v string, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		o := setHeader(k, v)
		o.AppendAction = action
		return o
	}
	appendOpt := setHeader("x-foo", "2")
	//lint:ignore SA1019 covers a deprecated Envoy field that Envoy, and so the data plane, still honours
	appendOpt.Append = wrapperspb.Bool(true)
	tests := []struct {
		name      string
		m         *extprocv3.HeaderMutation
		replacing bool
		rules     *mutationrulesv3.HeaderMutationRules
		want      map[string][]string // expected values of the named headers
		wantErr   bool
	}{
		{"set overwrites by default", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-foo", "2")}}, false, nil,
			map[string][]string{"x-foo": {"2"}}, false},
		{"deprecated append true appends", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{appendOpt}}, false, nil,
			map[string][]string{"x-foo": {"1", "2"}}, false},
		{"ADD_IF_ABSENT keeps an existing header", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			opt("x-foo", "2", corev3.HeaderValueOption_ADD_IF_ABSENT), opt("x-new", "n", corev3.HeaderValueOption_ADD_IF_ABSENT)}}, false, nil,
			map[string][]string{"x-foo": {"1"}, "x-new": {"n"}}, false},
		{"OVERWRITE_IF_EXISTS does not add", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			opt("x-foo", "2", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS), opt("x-new", "n", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS)}}, false, nil,
			map[string][]string{"x-foo": {"2"}, "x-new": nil}, false},
		{"routing and x-envoy headers are dropped silently, :path may change", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader(":authority", "evil"), setHeader("host", "evil"), setHeader(":method", "GET"), setHeader(":scheme", "http"),
			setHeader("x-envoy-original", "b"), setHeader(":path", "/v2/chat")}}, false, nil,
			map[string][]string{":authority": {"gw.example"}, "host": {"gw.example"}, ":method": {"POST"}, ":scheme": {"https"},
				"x-envoy-original": {"a"}, ":path": {"/v2/chat"}}, false},
		{"CONTINUE_AND_REPLACE may change :method", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(":method", "PUT")}}, true, nil,
			map[string][]string{":method": {"PUT"}}, false},
		{"system headers and host cannot be removed", &extprocv3.HeaderMutation{RemoveHeaders: []string{":path", "host", "X-Foo"}}, false, nil,
			map[string][]string{":path": {"/v1/chat"}, "host": {"gw.example"}, "x-foo": nil}, false},
		{"keys are lower-cased", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("X-Upper", "u")}}, false, nil,
			map[string][]string{"x-upper": {"u"}}, false},
		{"value instead of raw_value sets an empty value", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: "x-foo", Value: "string"}}}}, false, nil,
			map[string][]string{"x-foo": {""}}, false},
		{"invalid value fails", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-foo", "a\nb")}}, false, nil, nil, true},
		{"invalid name fails", &extprocv3.HeaderMutation{RemoveHeaders: []string{"bad name"}}, false, nil, nil, true},
		{"disallow_is_error turns a dropped change into an error", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("host", "x")}}, false,
			&mutationrulesv3.HeaderMutationRules{DisallowIsError: wrapperspb.Bool(true)}, nil, true},
		{"allow_all_routing permits :authority", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(":authority", "other")}}, false,
			&mutationrulesv3.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(true)}, map[string][]string{":authority": {"other"}}, false},
		{"an invalid :status fails", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(":status", "abc")}}, false, nil, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newMutationChecker(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			h := base()
			err = applyHeaderMutation(&h, tc.m, tc.replacing, c, nil)
			if tc.wantErr {
				if !errors.Is(err, errMutation) {
					t.Fatalf("err = %v, want a mutation error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				var got []string
				for _, f := range h {
					if f.key == k {
						got = append(got, f.value)
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestApplyHeaderOptions(t *testing.T) {
	h := headerMap{{"a", "1"}}
	applyHeaderOptions(&h, []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "a", Value: "2"}}, // route default: append
		{Header: &corev3.HeaderValue{Key: "b", Value: "3"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{Header: &corev3.HeaderValue{Key: "c", Value: "4"}, Append: wrapperspb.Bool(false)},
	})
	want := headerMap{{"a", "1"}, {"a", "2"}, {"b", "3"}, {"c", "4"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %v, want %v", h, want)
	}
}

// TestHeaderMapAddTo: headers reach an http.Header under the names
// textproto gives them (cached or not), values of one name in order, and
// appending to one name's values never changes another's.
func TestHeaderMapAddTo(t *testing.T) {
	h := headerMap{{":status", "200"}, {"x-ratelimit-limit-requests", "60"}, {"content-type", "application/json"},
		{"x-ratelimit-limit-requests", "61"}, {"X-Already-Canonical", "a"}, {"x-odd name", "b"}, {"connection", "close"},
		{"x-request-id", "r"}}
	for round := range 2 { // the second round answers from the cache
		out := http.Header{"X-Request-Id": {"earlier"}}
		h.addTo(out)
		want := http.Header{
			"X-Ratelimit-Limit-Requests": {"60", "61"},
			"Content-Type":               {"application/json"},
			"X-Already-Canonical":        {"a"},
			"x-odd name":                 {"b"},
			"X-Request-Id":               {"earlier", "r"},
		}
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("round %d: %v, want %v", round, out, want)
		}
		out["Content-Type"] = append(out["Content-Type"], "text/plain")
		if got := out.Values("X-Already-Canonical"); len(got) != 1 || got[0] != "a" {
			t.Errorf("round %d: appending to one header changed another: %v", round, got)
		}
	}
	for k, v := range map[string]string{"x-ratelimit-limit-requests": "X-Ratelimit-Limit-Requests", "x-odd name": "x-odd name"} {
		if got := canonicalKey(k); got != textproto.CanonicalMIMEHeaderKey(k) || got != v {
			t.Errorf("canonicalKey(%q) = %q, want %q", k, got, v)
		}
	}
}
