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
	srv, addr, err := Start(ctx, "127.0.0.1:0", Options{APIKey: "k"})
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
	if _, _, err := Start(t.Context(), "127.0.0.1:-1", Options{}); err == nil {
		t.Fatal("Start on an invalid address succeeded")
	}
}
