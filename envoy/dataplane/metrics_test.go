package dataplane

import "testing"

func TestPathFamily(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions":          "/v1/chat",
		"/v1/files/file-abc/content":    "/v1/files",
		"/v1/vector_stores/vs_1/search": "/v1/vector_stores",
		"/v1/models":                    "/v1/models",
		"/v1/chatty":                    "other",
		"/v2/files":                     "other",
		"/v1/" + "x/../files":           "other",
		"/healthz":                      "other",
	} {
		if got := pathFamily(path); got != want {
			t.Errorf("pathFamily(%q) = %q, want %q", path, got, want)
		}
	}
}
