package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/keys"
)

// otherKey issues a second owner's key on the stack.
func (s *stack) otherKey(t *testing.T, tier string) string {
	t.Helper()
	spec := keys.Spec{Name: "other", Tier: tier}
	if tier == "enterprise" {
		spec.RPM, spec.TPM = 1_000_000, 1_000_000_000
	}
	k, _, err := s.gw.Keys.Issue(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestFilesThroughTheGateway(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	c := s.client()
	content := []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}}` + "\n")

	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(bytes.NewReader(content), "input.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.ID, "file-") || f.Bytes != int64(len(content)) || f.Filename != "input.jsonl" || f.Purpose != "batch" {
		t.Fatalf("file = %+v", f)
	}
	got, err := c.Files.Get(ctx, f.ID)
	if err != nil || got.ID != f.ID {
		t.Fatalf("get: %+v, %v", got, err)
	}
	resp, err := c.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(body, content) {
		t.Fatalf("content = %q, want %q", body, content)
	}
	page, err := c.Files.List(ctx, openai.FileListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != f.ID {
		t.Fatalf("list: %+v, %v", page, err)
	}

	// Another owner sees nothing of it.
	other := s.client(option.WithAPIKey(s.otherKey(t, "enterprise")))
	if _, err := other.Files.Get(ctx, f.ID); err == nil {
		t.Fatal("another owner read the file")
	} else {
		apiError(t, err, 404, "not_found")
	}
	if page, err := other.Files.List(ctx, openai.FileListParams{}); err != nil || len(page.Data) != 0 {
		t.Fatalf("another owner's list: %+v, %v", page, err)
	}
	if _, err := other.Files.Delete(ctx, f.ID); err == nil {
		t.Fatal("another owner deleted the file")
	}

	// No key, no files; and no forged owner header helps.
	req, _ := http.NewRequest(http.MethodGet, s.gw.BaseURL()+"/files/"+f.ID, nil)
	req.Header.Set("x-switchyard-owner", "anything")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 401 || gjson.GetBytes(b, "error.code").String() != "invalid_api_key" {
		t.Fatalf("no key: %d %s", r.StatusCode, b)
	}

	if d, err := c.Files.Delete(ctx, f.ID); err != nil || !d.Deleted {
		t.Fatalf("delete: %+v, %v", d, err)
	}
	if _, err := c.Files.Get(ctx, f.ID); err == nil {
		t.Fatal("deleted file still there")
	}
}

// patternReader yields n bytes of a repeating JSONL-ish pattern without
// holding them.
type patternReader struct{ left int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(b))
	if n > p.left {
		n = p.left
	}
	for i := range b[:n] {
		b[i] = "0123456789abcdef\n"[(p.left-int64(i))%17]
	}
	p.left -= n
	return int(n), nil
}

// TestLargeUploadsStreamThroughTheDataPlane sends uploads far larger than
// the data plane's buffer limit: they stream to the backend, come back
// byte-exact, and one byte over 200 MB is refused with 413.
func TestLargeUploadsStreamThroughTheDataPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("large upload")
	}
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	c := s.client()

	const size = 64 << 20 // twice the 32 MiB buffer limit
	want := sha256.New()
	_, _ = io.Copy(want, &patternReader{left: size})
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(&patternReader{left: size}, "big.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeUserData,
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.Bytes != size {
		t.Fatalf("bytes = %d, want %d", f.Bytes, size)
	}
	resp, err := c.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, _ := io.Copy(got, resp.Body)
	resp.Body.Close()
	if n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("downloaded %d bytes, digest match %v", n, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}

	_, err = c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(&patternReader{left: 200_000_001}, "huge.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err == nil {
		t.Fatal("a file over 200 MB was accepted")
	}
	apiError(t, err, 413, "file_too_large")
}

// batchLine is one input line.
func batchLine(id, model, text string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":%q}]}}`, id, model, text)
}

// waitBatch polls until the batch reaches a terminal status.
func waitBatch(t *testing.T, c openai.Client, id string, within time.Duration) *openai.Batch {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch b.Status {
		case "completed", "failed", "expired", "cancelled":
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still %s after %s (%+v)", id, b.Status, within, b.RequestCounts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readJSONL downloads a file and returns its lines by custom_id.
func readJSONL(t *testing.T, c openai.Client, fileID string) map[string]gjson.Result {
	t.Helper()
	out := map[string]gjson.Result{}
	if fileID == "" {
		return out
	}
	resp, err := c.Files.Content(context.Background(), fileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := gjson.ParseBytes(append([]byte(nil), sc.Bytes()...))
		id := line.Get("custom_id").String()
		if _, dup := out[id]; dup {
			t.Errorf("custom_id %q appears twice", id)
		}
		out[id] = line
	}
	return out
}

func TestBatchThroughTheGateway(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	// A free key (10 requests a minute) runs a 40-line batch: batch lines
	// are outside the requests per minute (they draw from its tokens per
	// minute, which 40 short lines do not exhaust).
	free := s.client(option.WithAPIKey(s.otherKey(t, "free")))

	var in strings.Builder
	const n = 40
	for i := range n {
		fmt.Fprintln(&in, batchLine(fmt.Sprintf("req-%d", i), "demo/chat", fmt.Sprintf("line %d", i)))
	}
	// One line names a model the gateway does not serve: a failed line,
	// not a failed batch.
	fmt.Fprintln(&in, batchLine("bad-model", "nobody/nothing", "x"))
	f, err := free.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(in.String()), "batch.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := free.Batches.New(ctx, openai.BatchNewParams{
		InputFileID:      f.ID,
		Endpoint:         openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := waitBatch(t, free, b.ID, 30*time.Second)
	if done.Status != "completed" || done.RequestCounts.Total != n+1 || done.RequestCounts.Completed != n || done.RequestCounts.Failed != 1 {
		t.Fatalf("batch = %s %+v", done.Status, done.RequestCounts)
	}
	outs := readJSONL(t, free, done.OutputFileID)
	errs := readJSONL(t, free, done.ErrorFileID)
	if len(outs) != n || len(errs) != 1 {
		t.Fatalf("%d output lines, %d error lines", len(outs), len(errs))
	}
	for i := range n {
		l := outs[fmt.Sprintf("req-%d", i)]
		if l.Get("response.status_code").Int() != 200 ||
			l.Get("response.body.choices.0.message.content").String() != fmt.Sprintf("Echo: line %d", i) {
			t.Errorf("line %d: %s", i, l.Raw)
		}
	}
	if e := errs["bad-model"]; e.Get("response.status_code").Int() != 404 || e.Get("response.body.error.code").String() != "model_not_found" {
		t.Errorf("bad model line: %s", e.Raw)
	}

	// The owner's chat requests still have their whole minute: the batch
	// spent none of it.
	for i := range 10 {
		if _, err := free.Chat.Completions.New(ctx, chatParams("after")); err != nil {
			t.Fatalf("chat %d after the batch: %v", i, err)
		}
	}

	// Another owner cannot see the batch.
	other := s.client(option.WithAPIKey(s.otherKey(t, "enterprise")))
	if _, err := other.Batches.Get(ctx, b.ID); err == nil {
		t.Fatal("another owner read the batch")
	}
}

func TestBatchLimits(t *testing.T) {
	// Every line takes 200 ms upstream, so batches stay running while the
	// test looks at them.
	s := newStack(t, stackOptions{serviceTime: 200 * time.Millisecond})
	ctx := context.Background()
	c := s.client()
	upload := func(content string) string {
		f, err := c.Files.New(ctx, openai.FileNewParams{
			File:    openai.File(strings.NewReader(content), "in.jsonl", "application/jsonl"),
			Purpose: openai.FilePurposeBatch,
		})
		if err != nil {
			t.Fatal(err)
		}
		return f.ID
	}

	t.Run("invalid lines fail the batch with their line numbers", func(t *testing.T) {
		id := upload(batchLine("a", "demo/chat", "x") + "\n" + batchLine("a", "demo/chat", "dup") + "\nnot json\n")
		b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: id,
			Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
		if err != nil {
			t.Fatal(err)
		}
		done := waitBatch(t, c, b.ID, 10*time.Second)
		if done.Status != "failed" || len(done.Errors.Data) == 0 {
			t.Fatalf("batch = %s, errors %+v", done.Status, done.Errors)
		}
		lines := map[int64]bool{}
		for _, e := range done.Errors.Data {
			lines[e.Line] = true
		}
		if !lines[2] || !lines[3] {
			t.Errorf("errors do not name lines 2 and 3: %+v", done.Errors.Data)
		}
	})
	t.Run("bad parameters", func(t *testing.T) {
		id := upload(batchLine("a", "demo/chat", "x") + "\n")
		for _, tt := range []struct {
			name   string
			params openai.BatchNewParams
			status int
			code   string
		}{
			{"endpoint", openai.BatchNewParams{InputFileID: id, Endpoint: "/v1/moderations", CompletionWindow: "24h"}, 400, "invalid_value"},
			{"window", openai.BatchNewParams{InputFileID: id, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "48h"}, 400, "invalid_value"},
			{"unknown file", openai.BatchNewParams{InputFileID: "file-nope", Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, 404, "not_found"},
		} {
			if _, err := c.Batches.New(ctx, tt.params); err == nil {
				t.Errorf("%s: accepted", tt.name)
			} else if e := apiError(t, err, tt.status, tt.code); e.Param == "" {
				t.Errorf("%s: the error names no param", tt.name)
			}
		}
	})
	t.Run("ten batches at a time per key", func(t *testing.T) {
		// Slow lines keep the first ten batches running.
		var in strings.Builder
		for i := range 200 {
			fmt.Fprintln(&in, batchLine(fmt.Sprintf("r%d", i), "demo/chat", "slow"))
		}
		id := upload(in.String())
		var ids []string
		for range 10 {
			b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: id,
				Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, b.ID)
		}
		_, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: id,
			Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"})
		if err == nil {
			t.Fatal("an eleventh concurrent batch was accepted")
		}
		apiError(t, err, 429, "batch_limit_exceeded")
		// Cancelling frees a slot.
		for _, id := range ids {
			if _, err := c.Batches.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ids {
			if b := waitBatch(t, c, id, 20*time.Second); b.Status != "cancelled" {
				t.Errorf("batch %s ended %s", id, b.Status)
			}
		}
		if _, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: id,
			Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}); err != nil {
			t.Errorf("after cancelling, a new batch is refused: %v", err)
		}
	})
}
