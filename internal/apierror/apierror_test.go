package apierror

import (
	"encoding/json"
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
