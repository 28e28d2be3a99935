package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesClientDisconnect: a streamed store:true response whose
// client goes away after the first delta is kept as far as it got, with
// status incomplete, and a conversation continues from it.
func TestResponsesClientDisconnect(t *testing.T) {
	s := newStallStack(t)
	c := s.client()

	// stall/openai's provider sends two chunks, then nothing: the client
	// leaves while the model is still "writing".
	ctx, cancel := context.WithCancel(context.Background())
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "stall/openai",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("tell me a long story")},
		Store: openai.Bool(true),
	})
	var id, partial string
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "response.created" {
			id = ev.Response.ID
		}
		if ev.Type == "response.output_text.delta" {
			partial = ev.Delta
			break
		}
	}
	cancel()
	stream.Close()
	if id == "" || partial == "" {
		t.Fatalf("id %q, first delta %q (err %v)", id, partial, stream.Err())
	}

	// The gateway notices the disconnect and stores what it had.
	var got *responses.Response
	waitFor(t, 10*time.Second, "the cut response stored", func() bool {
		r, err := c.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		var e *openai.Error
		if errors.As(err, &e) && e.StatusCode == 404 {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		got = r
		return true
	})
	if got.Status != responses.ResponseStatusIncomplete || got.IncompleteDetails.Reason != "client_disconnected" {
		t.Errorf("status %q, incomplete_details %+v", got.Status, got.IncompleteDetails)
	}
	if len(got.Output) != 1 || got.Output[0].Type != "message" || got.Output[0].Status != "incomplete" ||
		got.OutputText() != partial {
		t.Errorf("output %s, want one incomplete message %q", got.RawJSON(), partial)
	}

	// The conversation continues from the cut response, which the model
	// sees as the assistant's turn.
	next, err := c.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:              "stall/healthy",
		PreviousResponseID: openai.String(id),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("go on")},
		Store:              openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.Status != responses.ResponseStatusCompleted || next.OutputText() != "Echo: go on" {
		t.Errorf("continuation %q %s", next.OutputText(), next.Status)
	}
	last := s.upstream.all()[len(s.upstream.all())-1]
	if !strings.Contains(string(last.body), `{"role":"assistant","content":`+jsonString(partial)+`}`) ||
		!strings.Contains(string(last.body), "tell me a long story") {
		t.Errorf("the continuation's model request lacks the cut turn: %s", last.body)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
