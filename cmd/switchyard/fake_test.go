package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFakePromptCacheFlags starts `switchyard fake -prompt-cache` and sends
// the same long prompt twice: the second reply reports the whole prompt as
// cached and comes after -cached-service-time instead of -service-time.
func TestFakePromptCacheFlags(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"fake", "--listen", addr, "--prompt-cache", "--prompt-cache-min-tokens", "100",
			"--service-time", "300ms", "--cached-service-time", "0s"}, &out, &errOut)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fake: %v", err)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "prompt cache on"); {
		if time.Now().After(deadline) {
			t.Fatalf("no start line; stdout %q stderr %q", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
		{"role": "system", "content": strings.Repeat("Follow the policy. ", 50)}, // 150 words
		{"role": "user", "content": "hello"},
	}})
	send := func() (prompt, cached int, took time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return r.Usage.PromptTokens, r.Usage.PromptTokensDetails.CachedTokens, time.Since(start)
	}
	p1, c1, t1 := send()
	p2, c2, t2 := send()
	if c1 != 0 || c2 != p2 || p1 != p2 {
		t.Errorf("cached_tokens %d then %d of prompt %d/%d; want 0 then the whole prompt", c1, c2, p1, p2)
	}
	if t1 < 300*time.Millisecond || t2 >= 300*time.Millisecond {
		t.Errorf("took %v then %v; want the service time, then less", t1, t2)
	}
}

func TestFakePromptCacheFlagsNeedCache(t *testing.T) {
	_, _, err := runCLI(t, "fake", "--listen", "127.0.0.1:0", "--cached-service-time", "1ms")
	if err == nil || !strings.Contains(err.Error(), "-prompt-cache") {
		t.Errorf("err = %v; want the missing -prompt-cache named", err)
	}
}
