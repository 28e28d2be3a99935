package apierror

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestShape(t *testing.T) {
	tests := []struct {
		name           string
		err            *Error
		status         int
		typ, code, prm any
		retryAfter     string
	}{
		{"401", InvalidAPIKey("no"), 401, "invalid_request_error", "invalid_api_key", nil, ""},
		{"404 model", ModelNotFound("x/y"), 404, "invalid_request_error", "model_not_found", "model", ""},
		{"400 param", InvalidParam("temperature", "bad %d", 3), 400, "invalid_request_error", "invalid_value", "temperature", ""},
		{"500 default type", &Error{Status: 502, Message: "m"}, 502, "server_error", nil, nil, ""},
		{"429", &Error{Status: 429, Type: TypeRequests, Code: "rate_limit_exceeded", Message: "m", RetryAfter: 7}, 429, "requests", "rate_limit_exceeded", nil, "7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			tt.err.Write(w)
			if w.Code != tt.status || w.Header().Get("content-type") != "application/json" || w.Header().Get("retry-after") != tt.retryAfter {
				t.Fatalf("status %d headers %v", w.Code, w.Header())
			}
			var body map[string]map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			e := body["error"]
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := e[k]; !ok {
					t.Errorf("key %q missing: all four must be present", k)
				}
			}
			if e["type"] != tt.typ || e["code"] != tt.code || e["param"] != tt.prm {
				t.Errorf("got %v", e)
			}
		})
	}
}

// TestAllow: a listed method passes untouched; any other is answered 405 in
// the OpenAI shape with the Allow header naming the listed ones.
func TestAllow(t *testing.T) {
	for _, tc := range []struct {
		method    string
		ok        bool
		wantAllow string
	}{
		{http.MethodGet, true, ""},
		{http.MethodDelete, true, ""},
		{http.MethodPut, false, "GET, DELETE"},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(tc.method, "/v1/things/x", nil)
		if got := Allow(w, r, http.MethodGet, http.MethodDelete); got != tc.ok {
			t.Errorf("%s: Allow = %v, want %v", tc.method, got, tc.ok)
		}
		if tc.ok {
			if w.Body.Len() != 0 || w.Header().Get("Allow") != "" {
				t.Errorf("%s: answered %d %q", tc.method, w.Code, w.Body.String())
			}
			continue
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusMethodNotAllowed ||
			body.Error.Code != "method_not_allowed" || w.Header().Get("Allow") != tc.wantAllow {
			t.Errorf("%s: %d allow %q body %s (%v)", tc.method, w.Code, w.Header().Get("Allow"), w.Body.String(), err)
		}
	}
}
