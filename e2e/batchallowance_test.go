package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// uploadBatch uploads n chat lines (custom_ids prefix-0...) as a batch input
// file and returns its id.
func uploadBatch(t *testing.T, c openai.Client, prefix string, n int, text string) string {
	t.Helper()
	var in strings.Builder
	for i := range n {
		fmt.Fprintln(&in, batchLine(fmt.Sprintf("%s-%d", prefix, i), "demo/chat", text))
	}
	f, err := c.Files.New(context.Background(), openai.FileNewParams{
		File:    openai.File(strings.NewReader(in.String()), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f.ID
}

func newBatch(c openai.Client, fileID string) (*openai.Batch, error) {
	return c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: fileID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
}

// TestBatchLineAllowance: a tier's daily batch line allowance is enforced
// when a batch is created: a file that alone exceeds it is a 400, one that
// does not fit in what is left today a 429 naming the limit.
func TestBatchLineAllowance(t *testing.T) {
	s := newStack(t, stackOptions{extraYAML: `tiers:
  tiny: {rpm: 100, tpm: 100000, batch_lines_per_day: 5}
`})
	key, _ := s.issue(t, keys.Spec{Name: "tiny", Tier: "tiny"})
	c := s.client(option.WithAPIKey(key))

	six := uploadBatch(t, c, "six", 6, "x")
	_, err := newBatch(c, six)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "batch_line_limit_exceeded" ||
		apiErr.Param != "input_file_id" || !strings.Contains(apiErr.Message, "more than 5 request lines") {
		t.Fatalf("6 lines on an allowance of 5: want 400 batch_line_limit_exceeded, got %v", err)
	}
	_, body := s.post(t, "/v1/batches", key, []byte(`{"input_file_id":"`+six+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	validateSchema(t, "ErrorResponse", body)

	if _, err := newBatch(c, uploadBatch(t, c, "three", 3, "x")); err != nil {
		t.Fatalf("3 lines: %v", err)
	}
	_, err = newBatch(c, uploadBatch(t, c, "again", 3, "x"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "batch_line_limit_exceeded" ||
		apiErr.Type != "requests" || !strings.Contains(apiErr.Message, "Limit 5, Used 3, Requested 3") {
		t.Fatalf("3 more lines: want 429 batch_line_limit_exceeded, got %v", err)
	}
	if ra, _ := strconv.Atoi(apiErr.Response.Header.Get("retry-after")); ra < 23*3600 || ra > 24*3600 {
		t.Errorf("retry-after = %q, want about a day", apiErr.Response.Header.Get("retry-after"))
	}
	// What is left still fits.
	if _, err := newBatch(c, uploadBatch(t, c, "two", 2, "x")); err != nil {
		t.Fatalf("2 lines: %v", err)
	}
}

// stepClock is a rate limit clock that only moves when told.
type stepClock struct {
	mu  sync.Mutex
	now int64
}

func (c *stepClock) UnixNow() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += int64((d + time.Second - 1) / time.Second)
}

// TestBatchPacedByTPM runs a batch on a key whose TPM fits two lines a
// minute. The runner's pauses move the rate limiter's clock instead of
// waiting, and each records the key's tokens counter as the window closes:
// no window is charged more than the TPM, the batch took as many windows as
// the TPM allows lines, and every line ran exactly once.
func TestBatchPacedByTPM(t *testing.T) {
	const (
		tpm   = 60
		lines = 10
	)
	// One 80-byte word: admission estimates 80/4 + 3 = 23 tokens, which the
	// line reserves; the fake answers with fewer (a word in, two out), so
	// nothing more is charged at the end and the counter is exactly the
	// reservations: two lines (46) fit in a window, a third does not.
	word := strings.Repeat("w", 80)
	clock := &stepClock{now: fixedClock{}.UnixNow()}
	var (
		mu      sync.Mutex
		windows []int64 // the key's tokens used when each window closed
		failure error
		readUse func() (int64, error)
	)
	after := func(d time.Duration) <-chan time.Time {
		used, err := readUse()
		mu.Lock()
		windows = append(windows, used)
		if err != nil && failure == nil {
			failure = err
		}
		mu.Unlock()
		clock.advance(d)
		ch := make(chan time.Time, 1)
		ch <- time.Time{}
		return ch
	}
	s := newStack(t, stackOptions{gateway: func(o *gateway.Options) {
		o.RateLimitClock = clock
		o.BatchPaceAfter = after
	}})
	key, k := s.issue(t, keys.Spec{Name: "paced", Tier: "enterprise", RPM: 1000, TPM: tpm})
	lim := ratelimit.Limits{RPM: 1000, TPM: tpm, CustomRPM: true, CustomTPM: true}
	rls := s.rls(t)
	readUse = func() (int64, error) {
		resp, err := rls.c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: ratelimit.Domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{ratelimit.TokensDescriptor("enterprise", k.LimitID(), lim, 0)}})
		if err != nil {
			return 0, err
		}
		st := resp.GetStatuses()[0]
		return int64(st.GetCurrentLimit().GetRequestsPerUnit()) - int64(st.GetLimitRemaining()), nil
	}
	c := s.client(option.WithAPIKey(key))
	b, err := newBatch(c, uploadBatch(t, c, "line", lines, word))
	if err != nil {
		t.Fatal(err)
	}
	done := waitBatch(t, c, b.ID, 30*time.Second)
	last, err := readUse()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failure != nil {
		t.Fatal(failure)
	}
	windows = append(windows, last)
	t.Logf("tokens used per window: %v", windows)

	if done.Status != "completed" || done.RequestCounts.Completed != lines || done.RequestCounts.Failed != 0 {
		t.Fatalf("batch = %s %+v", done.Status, done.RequestCounts)
	}
	outs := readJSONL(t, c, done.OutputFileID) // fails on a custom_id seen twice
	for i := range lines {
		if l, ok := outs[fmt.Sprintf("line-%d", i)]; !ok || l.Get("response.status_code").Int() != 200 {
			t.Errorf("line-%d: %s", i, l.Raw)
		}
	}
	// Two lines a window: ten lines take five windows, four pauses.
	if len(windows) < lines/2 {
		t.Errorf("%d windows, want at least %d: the batch was not paced", len(windows), lines/2)
	}
	var total int64
	for i, used := range windows {
		if used > tpm {
			t.Errorf("window %d charged %d tokens, over the TPM %d", i, used, tpm)
		}
		total += used
	}
	if total != lines*23 {
		t.Errorf("tokens charged over all windows = %d, want %d (23 a line)", total, lines*23)
	}
}
