package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// holdMarker in a request's input makes the vendors hold it (holdRequests).
const holdMarker = "hold-this-request"

// holdRequests holds every vendor request whose body carries holdMarker,
// reporting it on entered, until the request is cancelled (then reported
// on abandoned), or release is closed (then it is answered): a background
// run kept in progress until it is cancelled or let go.
type holdRequests struct {
	entered, abandoned chan string
	release            chan struct{}
}

func (h *holdRequests) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		if bytes.Contains(b, []byte(holdMarker)) {
			h.entered <- r.URL.Path
			select {
			case <-r.Context().Done():
				h.abandoned <- r.URL.Path
				return
			case <-h.release:
			}
		}
		next.ServeHTTP(w, r)
	})
}

func waitSignal(t *testing.T, ch <-chan string, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// pollStatus gets id until its status is want, as a client polls.
func pollStatus(t *testing.T, c *openai.Client, id string, want responses.ResponseStatus) *responses.Response {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		r, err := c.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if r.Status == want {
			return r
		}
		if r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress {
			t.Fatalf("get %s: status %s, want %s", id, r.Status, want)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("get %s: still %s", id, r.Status)
		}
	}
}

// TestBackgroundResponsesOnEveryVendor drives background responses through
// the gateway with openai-go on each vendor kind: created queued and
// polled to completed (its tokens charged to the key), cancelled while in
// progress (the vendor request is dropped), and streamed with the client
// hanging up, then resumed with starting_after: every event after it, in
// order, no gap, no repeat, to response.completed.
func TestBackgroundResponsesOnEveryVendor(t *testing.T) {
	h := &holdRequests{entered: make(chan string, 8), abandoned: make(chan string, 8)}
	vs := newVendorStack(t, h.wrap)
	rls := vs.rls(t)
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini"} {
		t.Run(model, func(t *testing.T) {
			key, k := vs.issue(t, keys.Spec{Name: "background", Tier: "standard"})
			c := vs.clientWith(key)
			ctx := context.Background()
			params := func(text string) responses.ResponseNewParams {
				return responses.ResponseNewParams{Model: model, Background: openai.Bool(true),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
			}

			t.Run("poll", func(t *testing.T) {
				r, err := c.Responses.New(ctx, params("Say something in the background."))
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != responses.ResponseStatusQueued || !r.Background {
					t.Fatalf("created %s background %v", r.Status, r.Background)
				}
				done := pollStatus(t, c, r.ID, responses.ResponseStatusCompleted)
				if done.OutputText() == "" || done.Usage.TotalTokens == 0 || done.Model != model {
					t.Errorf("completed: text %q usage %+v model %s", done.OutputText(), done.Usage, done.Model)
				}
				rls.waitUsedAtLeast(t, "standard", k.LimitID(), done.Usage.TotalTokens)
			})

			t.Run("cancel", func(t *testing.T) {
				r, err := c.Responses.New(ctx, params("Wait: "+holdMarker))
				if err != nil {
					t.Fatal(err)
				}
				waitSignal(t, h.entered, "the vendor request")
				got, err := c.Responses.Cancel(ctx, r.ID)
				if err != nil || got.Status != responses.ResponseStatusCancelled {
					t.Fatalf("cancel: %v %+v", err, got)
				}
				waitSignal(t, h.abandoned, "the vendor request to be dropped")
				if again, err := c.Responses.Cancel(ctx, r.ID); err != nil || again.Status != responses.ResponseStatusCancelled {
					t.Errorf("cancel again: %v %+v", err, again)
				}
				if g, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil || g.Status != responses.ResponseStatusCancelled {
					t.Errorf("get: %v %+v", err, g)
				}
			})

			t.Run("stream, hang up, resume", func(t *testing.T) {
				sctx, hangUp := context.WithCancel(ctx)
				s := c.Responses.NewStreaming(sctx, params("Tell me a story, streamed."))
				var id string
				var first []int64
				for s.Next() {
					ev := s.Current()
					first = append(first, ev.SequenceNumber)
					if ev.Type == "response.created" {
						id = ev.AsResponseCreated().Response.ID
					}
					if ev.Type == "response.in_progress" {
						break
					}
				}
				hangUp()
				s.Close()
				if id == "" || len(first) == 0 {
					t.Fatalf("no response.created before the hang-up: %v %v", first, s.Err())
				}
				last := first[len(first)-1]
				for _, after := range []int64{last, 0} {
					r := c.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(after)})
					var seqs []int64
					var text strings.Builder
					var final *responses.Response
					for r.Next() {
						ev := r.Current()
						seqs = append(seqs, ev.SequenceNumber)
						switch ev.Type {
						case "response.output_text.delta":
							text.WriteString(ev.Delta)
						case "response.completed":
							f := ev.AsResponseCompleted().Response
							final = &f
						}
					}
					if err := r.Err(); err != nil {
						t.Fatalf("resume after %d: %v", after, err)
					}
					for i, n := range seqs {
						if n != after+1+int64(i) {
							t.Fatalf("resumed after %d: sequence numbers %v", after, seqs)
						}
					}
					if final == nil || final.Status != "completed" || final.OutputText() == "" || final.OutputText() != text.String() {
						t.Errorf("resumed after %d: final %+v, deltas %q", after, final, text.String())
					}
				}
			})
		})
	}
}

// TestBackgroundAcrossReplicas: two gateways on one PostgreSQL. A streamed
// background response created through one, whose client hangs up, is
// followed through the other with starting_after while the first still
// runs it: the events come as the first records them, to the end.
func TestBackgroundAcrossReplicas(t *testing.T) {
	t.Setenv(fleetDSNEnv, pgtest.DSN(t))
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(make([]byte, envelope.KeySize)))
	extra := fmt.Sprintf("storage:\n  metadata:\n    kind: postgres\n    dsn_env: %s\n", fleetDSNEnv)
	h := &holdRequests{entered: make(chan string, 8), abandoned: make(chan string, 8), release: make(chan struct{})}
	a := newStack(t, stackOptions{extraYAML: extra, wrapUpstream: h.wrap})
	b := newStack(t, stackOptions{extraYAML: extra, wrapUpstream: h.wrap, gateway: func(o *gateway.Options) { o.DataDir = a.dataDir }})
	ctx := context.Background()
	ca, cb := a.client(), b.client(option.WithAPIKey(a.key))

	sctx, hangUp := context.WithCancel(ctx)
	s := ca.Responses.NewStreaming(sctx, responses.ResponseNewParams{Model: "demo/chat", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("across replicas " + holdMarker)}})
	var id string
	var last int64
	for s.Next() {
		ev := s.Current()
		last = ev.SequenceNumber
		if ev.Type == "response.created" {
			id = ev.AsResponseCreated().Response.ID
		}
		if ev.Type == "response.in_progress" {
			break
		}
	}
	hangUp()
	s.Close()
	if id == "" {
		t.Fatalf("no response.created: %v", s.Err())
	}
	waitSignal(t, h.entered, "the model call")

	// Followed on b while the run is held on a replica; then let go.
	r := cb.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(last)})
	defer r.Close()
	// GetStreaming returns with the response's headers: b is following.
	close(h.release)
	var seqs []int64
	var text strings.Builder
	var final *responses.Response
	for r.Next() {
		ev := r.Current()
		seqs = append(seqs, ev.SequenceNumber)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			f := ev.AsResponseCompleted().Response
			final = &f
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	for i, n := range seqs {
		if n != last+1+int64(i) {
			t.Fatalf("sequence numbers %v after %d", seqs, last)
		}
	}
	if final == nil || final.Status != "completed" || !strings.Contains(final.OutputText(), "across replicas") || final.OutputText() != text.String() {
		t.Errorf("followed on the other replica: final %+v, deltas %q", final, text.String())
	}
	got, err := cb.Responses.Get(ctx, id, responses.ResponseGetParams{})
	if err != nil || got.Status != "completed" {
		t.Errorf("get on the other replica: %v %+v", err, got)
	}
}
