package files

import (
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestHeadRequests: HEAD is answered wherever GET is (RFC 9110 requires
// it of a general-purpose server), with GET's headers and no body; a HEAD
// of a file's content does not stream the blob.
func TestHeadRequests(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	f := mustCreate(t, s, "o", File{Filename: "a.jsonl", Purpose: PurposeBatch}, "{\"a\":1}\n")
	srv := httptest.NewServer(withOwner(s.Handler()))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/v1/files", "/v1/files/" + f.ID, "/v1/files/" + f.ID + "/content"} {
		req, _ := http.NewRequest(http.MethodHead, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer o")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) != 0 {
			t.Errorf("HEAD %s: %d %q", path, resp.StatusCode, body)
		}
		if path == "/v1/files/"+f.ID+"/content" && resp.Header.Get("Content-Length") != strconv.FormatInt(f.Bytes, 10) {
			t.Errorf("HEAD content: Content-Length %q, want %d", resp.Header.Get("Content-Length"), f.Bytes)
		}
	}
	// HEAD of another owner's file is the same 404 as GET.
	req, _ := http.NewRequest(http.MethodHead, srv.URL+"/v1/files/"+f.ID+"/content", nil)
	req.Header.Set("Authorization", "Bearer other")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("HEAD of another owner's content: %d", resp.StatusCode)
	}
}

// TestContentDisposition: a download names the file, and a hostile filename
// (quotes, parameters, CR LF, non-ASCII) can neither break out of the
// header nor add one: the header parses back to exactly the filename.
func TestContentDisposition(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	srv := httptest.NewServer(withOwner(s.Handler()))
	t.Cleanup(srv.Close)
	for _, name := range []string{
		"plain.jsonl",
		"résumé données.jsonl",
		"evil\"; filename=\"x.exe",
		"a\r\nSet-Cookie: session=stolen\r\n\r\n.jsonl",
		"semi;colon\\back.txt",
	} {
		f := mustCreate(t, s, "o", File{Filename: name, Purpose: PurposeUserData}, "content")
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/files/"+f.ID+"/content", nil)
		req.Header.Set("Authorization", "Bearer o")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "content" {
			t.Fatalf("%q: %d %q", name, resp.StatusCode, body)
		}
		if resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("%q injected a header: %v", name, resp.Header)
		}
		disp, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition"))
		if err != nil || disp != "attachment" || params["filename"] != name {
			t.Errorf("%q: Content-Disposition %q parses to %q %q (%v)", name, resp.Header.Get("Content-Disposition"), disp, params, err)
		}
	}
}
