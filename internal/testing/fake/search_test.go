package fake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestBraveSearch(t *testing.T) {
	srv := httptest.NewServer(NewBraveSearch(Options{APIKey: "brave-key"}))
	t.Cleanup(srv.Close)
	get := func(t *testing.T, query, token string, headers ...string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+BraveSearchPath+"?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set(BraveTokenHeader, token)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.WriteString(string(buf[:n]))
			if err != nil {
				break
			}
		}
		return resp.StatusCode, []byte(b.String())
	}

	tests := []struct {
		name, query, token string
		headers            []string
		status             int
		results            int
		code               string
	}{
		{"default count", "q=Go+generics", "brave-key", nil, 200, 20, ""},
		{"count", "q=Go+generics&count=3", "brave-key", nil, 200, 3, ""},
		{"no token", "q=x", "", nil, 401, 0, "SUBSCRIPTION_TOKEN_INVALID"},
		{"wrong token", "q=x", "nope", nil, 401, 0, "SUBSCRIPTION_TOKEN_INVALID"},
		{"no query", "count=2", "brave-key", nil, 422, 0, "VALIDATION"},
		{"count too big", "q=x&count=21", "brave-key", nil, 422, 0, "VALIDATION"},
		{"injected fault", "q=x", "brave-key", []string{HeaderStatus, "503"}, 503, 0, "FAKE_FAULT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := get(t, tc.query, tc.token, tc.headers...)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			var got struct {
				Type  string
				Query struct{ Original string }
				Web   struct{ Results []BraveResult }
				Error struct {
					Status int
					Code   string
				}
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if tc.code != "" {
				if got.Type != "ErrorResponse" || got.Error.Code != tc.code || got.Error.Status != tc.status {
					t.Errorf("error body %s", body)
				}
				return
			}
			if len(got.Web.Results) != tc.results || got.Query.Original != "Go generics" {
				t.Fatalf("body %s", body)
			}
			r := got.Web.Results[0]
			if r.URL != "https://result1.example.com/go-generics" || r.Title != "Go generics - result 1" || !strings.Contains(r.Description, "Go generics") {
				t.Errorf("result %+v", r)
			}
			if _, err := url.Parse(r.URL); err != nil {
				t.Error(err)
			}
		})
	}

	// Deterministic: the same query gives the same results, another query
	// other ones; a query without words still gets a stable slug.
	_, a := get(t, "q=same", "brave-key")
	_, b := get(t, "q=same", "brave-key")
	_, c := get(t, "q=other", "brave-key")
	if string(a) != string(b) || string(a) == string(c) {
		t.Error("results are not a function of the query")
	}
	if r := BraveResults("?!", 1)[0]; r.URL != BraveResults("?!", 1)[0].URL || strings.HasSuffix(r.URL, "/") {
		t.Errorf("symbol-only query URL %q", r.URL)
	}
}
