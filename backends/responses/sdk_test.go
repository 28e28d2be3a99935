package responses

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// sdkClient is the official Go SDK pointed at the service, as alice.
func (e *env) sdkClient(owner string) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(e.srv.URL+"/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithHeader(ownerHeader, owner),
		option.WithMaxRetries(0),
	)
}

// TestSDK drives the service with the official openai-go SDK: the best
// proof that the wire format is what OpenAI clients expect.
func TestSDK(t *testing.T) {
	e := newEnv(t, envOptions{})
	client := e.sdkClient("alice")
	ctx := t.Context()

	r1, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "m",
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hello sdk")},
		Instructions: openai.String("Be nice."),
		Metadata:     map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.OutputText() != "Echo: hello sdk" || r1.Status != responses.ResponseStatusCompleted || r1.Usage.TotalTokens == 0 ||
		r1.Instructions.OfString != "Be nice." || r1.Metadata["k"] != "v" {
		t.Errorf("r1: text %q status %s usage %+v", r1.OutputText(), r1.Status, r1.Usage)
	}

	// Function tool round trip.
	weather := responses.ToolParamOfFunction("get_weather", map[string]any{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []string{"city"},
	}, false)
	r2, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "m",
		PreviousResponseID: openai.String(r1.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Oslo?")},
		Tools:              []responses.ToolUnionParam{weather},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.Output) != 1 || r2.Output[0].Type != "function_call" {
		t.Fatalf("r2 output %+v", r2.Output)
	}
	call := r2.Output[0].AsFunctionCall()
	if call.Name != "get_weather" || call.Arguments != `{"city":"sample"}` {
		t.Errorf("call %+v", call)
	}
	r3, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "m",
		PreviousResponseID: openai.String(r2.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("-3C, snow")},
			}},
		}},
		Tools: []responses.ToolUnionParam{weather},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r3.OutputText() != "The tool returned: -3C, snow" {
		t.Errorf("r3 text %q", r3.OutputText())
	}

	// Get, input items (auto-paging across pages of 2), delete.
	got, err := client.Responses.Get(ctx, r3.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != r3.ID || got.OutputText() != r3.OutputText() {
		t.Fatalf("get: %v %+v", err, got)
	}
	var kinds []string
	iter := client.Responses.InputItems.ListAutoPaging(ctx, r3.ID, responses.InputItemListParams{
		Order: responses.InputItemListParamsOrderAsc, Limit: openai.Int(2),
	})
	for iter.Next() {
		it := iter.Current()
		kinds = append(kinds, it.Type+":"+it.Role)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	want := "message:user|message:assistant|message:user|function_call:|function_call_output:"
	if strings.Join(kinds, "|") != want {
		t.Errorf("input items %s, want %s", strings.Join(kinds, "|"), want)
	}
	if err := client.Responses.Delete(ctx, r1.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("get deleted: %v", err)
	}

	// Another owner's id is a 400 on previous_response_id.
	bob := e.sdkClient("bob")
	_, err = bob.Responses.New(ctx, responses.ResponseNewParams{
		Model: "m", PreviousResponseID: openai.String(r3.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")},
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "previous_response_id" {
		t.Errorf("bob: %v", err)
	}
}

func TestSDKStreaming(t *testing.T) {
	e := newEnv(t, envOptions{})
	client := e.sdkClient("alice")
	stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream through the sdk")},
	})
	var deltas strings.Builder
	var final responses.Response
	var seq []int64
	for stream.Next() {
		ev := stream.Current()
		seq = append(seq, ev.SequenceNumber)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			final = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas.String() != "Echo: stream through the sdk" || final.OutputText() != deltas.String() || final.Status != "completed" {
		t.Errorf("deltas %q final %q status %s", deltas.String(), final.OutputText(), final.Status)
	}
	for i, n := range seq {
		if n != int64(i) {
			t.Fatalf("sequence numbers %v", seq)
		}
	}

	// A streamed function call.
	stream = client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("call")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("f", map[string]any{
			"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}}, false)},
	})
	var args, doneArgs string
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args += ev.AsResponseFunctionCallArgumentsDelta().Delta
		case "response.function_call_arguments.done":
			doneArgs = ev.AsResponseFunctionCallArgumentsDone().Arguments
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if args != `{"x":1}` || doneArgs != args {
		t.Errorf("arguments %q done %q", args, doneArgs)
	}
}
