package fake

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	srv, addr, err := Start(ctx, "127.0.0.1:0", KindOpenAI, Options{APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	url := "http://" + addr.String() + "/v1/chat/completions"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(hiBody))
	req.Header.Set("authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}

	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Post(url, "application/json", strings.NewReader(hiBody))
		if err != nil {
			break // closed, as wanted
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still answering after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartBadAddr(t *testing.T) {
	if _, _, err := Start(t.Context(), "127.0.0.1:-1", KindOpenAI, Options{}); err == nil {
		t.Fatal("Start on an invalid address succeeded")
	}
}

func TestStartKinds(t *testing.T) {
	for _, tc := range []struct {
		kind, path, header, body string
	}{
		{KindOpenAI, "/v1/chat/completions", "authorization", hiBody},
		{KindAnthropic, "/v1/messages", "x-api-key", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
		{KindGemini, "/v1beta/models/m:generateContent", "x-goog-api-key", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			_, addr, err := Start(ctx, "127.0.0.1:0", tc.kind, Options{APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr.String()+tc.path, strings.NewReader(tc.body))
			v := "k"
			if tc.header == "authorization" {
				v = "Bearer k"
			}
			req.Header.Set(tc.header, v)
			req.Header.Set("anthropic-version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
	if _, _, err := Start(t.Context(), "127.0.0.1:0", "cohere", Options{}); err == nil {
		t.Fatal("Start of an unknown kind succeeded")
	}
}
