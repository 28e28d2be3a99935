package vectorstores

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
)

// Embedding through the gateway's /v1/embeddings on the owner's behalf, so
// routing, failover, the owner's model allow-list and usage accounting are
// the gateway's.

// Batches of chunks sent in one embeddings request: OpenAI takes up to 2048
// inputs and 300,000 tokens per request; smaller batches keep a retry cheap.
const (
	embedBatchInputs = 64
	embedBatchTokens = 100_000
	// maxEmbedBody bounds an embeddings answer: 64 vectors of 3072 floats
	// written as decimals are about 4 MB.
	maxEmbedBody = 64 << 20
	// embedAttempts is how often a batch is tried when the gateway is
	// unreachable or answers 429 or 5xx.
	embedAttempts = 4
	maxRetryWait  = 30 * time.Second
)

// embedError is an embeddings request the gateway refused or could not
// serve; its message names the status only (a body may echo input).
type embedError struct {
	status  int
	message string // the gateway's error.message, for the owner
}

func (e *embedError) Error() string {
	return fmt.Sprintf("vectorstores: embeddings request failed with status %d", e.status)
}

// embed returns the unit-length embeddings of texts, in order.
func (s *Service) embed(ctx context.Context, owner string, texts []string) ([][]float32, error) {
	body, err := json.Marshal(struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}{s.model, texts})
	if err != nil {
		return nil, fmt.Errorf("vectorstores: embed: %w", err)
	}
	wait := time.Second
	for attempt := 1; ; attempt++ {
		vecs, retryAfter, err := s.embedOnce(ctx, owner, body, len(texts))
		if err == nil || attempt == embedAttempts || ctx.Err() != nil || retryAfter < 0 {
			return vecs, err
		}
		if retryAfter > 0 {
			wait = min(retryAfter, maxRetryWait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// embedOnce sends one request. retryAfter is negative when retrying cannot
// help, positive when the gateway said how long to wait.
func (s *Service) embedOnce(ctx context.Context, owner string, body []byte, n int) ([][]float32, time.Duration, error) {
	resp, err := s.gw.Do(ctx, owner, s.origin, http.MethodPost, "/v1/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("vectorstores: embed: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxEmbedBody))
	if err != nil {
		return nil, 0, fmt.Errorf("vectorstores: embed: read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &embedError{status: resp.StatusCode, message: gjson.GetBytes(b, "error.message").Str}
		switch {
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			var after time.Duration
			if secs, err := strconv.Atoi(resp.Header.Get("retry-after")); err == nil && secs > 0 {
				after = time.Duration(secs) * time.Second
			}
			return nil, after, e
		default:
			return nil, -1, e
		}
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, -1, fmt.Errorf("vectorstores: embed: invalid answer: %w", err)
	}
	vecs := make([][]float32, n)
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= n || len(d.Embedding) == 0 {
			return nil, -1, fmt.Errorf("vectorstores: embed: invalid answer: index %d of %d", d.Index, n)
		}
		vecs[d.Index] = normalize(d.Embedding)
	}
	for i, v := range vecs {
		if v == nil {
			return nil, -1, fmt.Errorf("vectorstores: embed: invalid answer: no embedding for input %d", i)
		}
	}
	return vecs, 0, nil
}

// normalize scales v to unit length in place, so cosine similarity is a
// dot product.
func normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return v
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return v
}

func encodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// dot is the dot product of q and the little-endian float32 vector b, read
// in place; ok is false when the sizes differ (another embedding model).
func dot(q []float32, b []byte) (float64, bool) {
	if len(b) != 4*len(q) {
		return 0, false
	}
	var sum float64
	for i, x := range q {
		sum += float64(x) * float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return sum, true
}
