package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/backends/sandbox"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

const searchKeyEnv = "SWITCHYARD_E2E_SEARCH_KEY"

// newResponsesStack is a stack whose web_search tool calls a fake Brave
// Search API.
func newResponsesStack(t *testing.T) *stack {
	t.Helper()
	t.Setenv(searchKeyEnv, "brave-e2e-key")
	search := httptest.NewServer(fake.NewBraveSearch(fake.Options{APIKey: "brave-e2e-key"}))
	t.Cleanup(search.Close)
	// The embedding model is appended to the stack's models list (the
	// stack's YAML ends inside it).
	return newStack(t, stackOptions{extraYAML: fmt.Sprintf(`  - id: demo/embed
    capabilities: [embeddings]
    context_window: 8191
    providers:
      - provider: fake-openai
        upstream_model: fake-embed-1
tools:
  web_search:
    kind: brave
    base_url: %s
    api_key_env: %s
  file_search:
    embedding_model: demo/embed
  code_interpreter:
    timeout: 10s
`, search.URL, searchKeyEnv)})
}

func TestResponsesThroughTheGateway(t *testing.T) {
	s := newResponsesStack(t)
	ctx := context.Background()
	c := s.client()

	r1, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "demo/chat",
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hello gateway")},
		Instructions: openai.String("Be brief."),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.OutputText() != "Echo: hello gateway" || r1.Status != responses.ResponseStatusCompleted || r1.Usage.TotalTokens == 0 {
		t.Fatalf("r1: %q %s %+v", r1.OutputText(), r1.Status, r1.Usage)
	}
	// The model call went through the gateway to the provider, with the
	// instructions as a system message and the provider's own credential.
	last := s.upstream.all()[len(s.upstream.all())-1]
	if !strings.Contains(string(last.body), `"Be brief."`) || last.header.Get("authorization") != "Bearer "+s.providerKey {
		t.Errorf("upstream saw %s (auth %q)", last.body, last.header.Get("authorization"))
	}

	// Conversation state: the second turn carries the first.
	r2, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "demo/chat",
		PreviousResponseID: openai.String(r1.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("and again")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() != "Echo: and again" || r2.Usage.InputTokens <= r1.Usage.InputTokens {
		t.Errorf("r2: %q, input tokens %d after %d", r2.OutputText(), r2.Usage.InputTokens, r1.Usage.InputTokens)
	}
	if got, err := c.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != r2.OutputText() {
		t.Errorf("get: %v", err)
	}

	// Streaming events, accumulated as the SDK does.
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream me please")},
	})
	var deltas strings.Builder
	var completed string
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response.OutputText()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas.String() != "Echo: stream me please" || completed != deltas.String() {
		t.Errorf("deltas %q, completed %q, events %v", deltas.String(), completed, types)
	}
	if len(types) < 4 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("event order %v", types)
	}

	// Another owner cannot continue or read the conversation.
	other := s.client(option.WithAPIKey(s.otherKey(t, "enterprise")))
	if _, err := other.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{}); err == nil {
		t.Error("another owner read the response")
	}
	if _, err := other.Responses.New(ctx, responses.ResponseNewParams{Model: "demo/chat",
		PreviousResponseID: openai.String(r1.ID), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}}); err == nil {
		t.Error("another owner continued the conversation")
	}

	// An unknown model is the gateway's 404, passed through.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "nobody/nothing",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	apiError(t, err, 404, "model_not_found")
}

func TestResponsesTools(t *testing.T) {
	s := newResponsesStack(t)
	ctx := context.Background()
	c := s.client()

	weather := responses.ToolParamOfFunction("get_weather", map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"},
	}, false)
	r1, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat", Tools: []responses.ToolUnionParam{weather},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Oslo?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" {
		t.Fatalf("output %+v", r1.Output)
	}
	call := r1.Output[0].AsFunctionCall()
	r2, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat", Tools: []responses.ToolUnionParam{weather}, PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("-3C, snow")},
			}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() != "The tool returned: -3C, snow" {
		t.Errorf("r2 = %q", r2.OutputText())
	}

	// Built-in web search: the gateway runs the search (the fake model
	// searches for "sample") and cites the results.
	r3, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("news?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var searched, cited bool
	for _, item := range r3.Output {
		switch item.Type {
		case "web_search_call":
			searched = item.Status == "completed"
		case "message":
			for _, part := range item.Content {
				for _, a := range part.Annotations {
					cited = cited || (a.Type == "url_citation" && strings.HasPrefix(a.URL, "https://"))
				}
			}
		}
	}
	if !searched || !cited || !strings.HasPrefix(r3.OutputText(), "The tool returned:") {
		t.Errorf("web search: searched %v cited %v text %q", searched, cited, r3.OutputText())
	}

	// Tools this gateway does not run are refused by name.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Tools: []responses.ToolUnionParam{{OfImageGeneration: &responses.ToolImageGenerationParam{}}},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("draw")},
	})
	if e := apiError(t, err, 400, "invalid_value"); e.Param != "tools" {
		t.Errorf("param = %q", e.Param)
	}
}

// TestResponsesCountAgainstRateLimits: a Responses call is a model request
// on the owner's key, admitted against its requests per minute.
func TestResponsesCountAgainstRateLimits(t *testing.T) {
	s := newResponsesStack(t)
	ctx := context.Background()
	free := s.client(option.WithAPIKey(s.otherKey(t, "free")))
	for i := range 10 {
		if _, err := free.Responses.New(ctx, responses.ResponseNewParams{Model: "demo/chat",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
	}
	_, err := free.Responses.New(ctx, responses.ResponseNewParams{Model: "demo/chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("one too many")}})
	apiError(t, err, 429, "rate_limit_exceeded")
	if _, err := free.Chat.Completions.New(ctx, chatParams("and chat")); err == nil {
		t.Error("chat after the responses spent the minute was admitted")
	}
}

// TestFileSearchThroughTheGateway: a vector store of an uploaded file,
// indexed with embeddings the gateway serves, searched directly and by the
// Responses API's file_search tool.
func TestFileSearchThroughTheGateway(t *testing.T) {
	s := newResponsesStack(t)
	ctx := context.Background()
	c := s.client()
	doc := "Opening hours.\nThe depot opens at seven.\n\nA sample of the timetable: trains leave every ten minutes.\n"
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(doc), "timetable.txt", "text/plain"),
		Purpose: openai.FilePurposeAssistants,
	})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := c.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("docs"), FileIDs: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for vs.Status != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("vector store still %s: %+v", vs.Status, vs.FileCounts)
		}
		time.Sleep(20 * time.Millisecond)
		if vs, err = c.VectorStores.Get(ctx, vs.ID); err != nil {
			t.Fatal(err)
		}
	}
	if vs.FileCounts.Completed != 1 || vs.FileCounts.Failed != 0 {
		t.Fatalf("file counts %+v", vs.FileCounts)
	}
	page, err := c.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
		Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("timetable sample")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) == 0 || page.Data[0].FileID != f.ID || !strings.Contains(page.Data[0].Content[0].Text, "timetable") {
		t.Fatalf("search: %+v", page.Data)
	}
	// The embeddings went through the gateway to the provider.
	embedded := false
	for _, r := range s.upstream.all() {
		embedded = embedded || strings.Contains(string(r.body), `"fake-embed-1"`)
	}
	if !embedded {
		t.Error("no embeddings request reached the provider")
	}

	// The Responses API's file_search: the fake model searches for
	// "sample", the service runs the search and cites the file.
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Tools: []responses.ToolUnionParam{{OfFileSearch: &responses.FileSearchToolParam{VectorStoreIDs: []string{vs.ID}}}},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("when do trains leave?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var searched, cited bool
	for _, item := range r.Output {
		switch item.Type {
		case "file_search_call":
			searched = item.Status == "completed"
		case "message":
			for _, part := range item.Content {
				for _, a := range part.Annotations {
					cited = cited || (a.Type == "file_citation" && a.FileID == f.ID)
				}
			}
		}
	}
	if !searched || !cited || !strings.Contains(r.OutputText(), "ten minutes") {
		t.Errorf("file_search: searched %v cited %v text %q", searched, cited, r.OutputText())
	}

	// Another owner can neither see the store nor search it.
	other := s.client(option.WithAPIKey(s.otherKey(t, "enterprise")))
	if _, err := other.VectorStores.Get(ctx, vs.ID); err == nil {
		t.Error("another owner read the vector store")
	}
	_, err = other.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Tools: []responses.ToolUnionParam{{OfFileSearch: &responses.FileSearchToolParam{VectorStoreIDs: []string{vs.ID}}}},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")},
	})
	if err == nil {
		t.Error("another owner searched the vector store")
	}
}

// TestFileBatchesThroughTheGateway: the official SDK's file batch helpers
// (UploadAndPoll, as OpenAI's file_search quickstart uses, and the batch
// file list) against the gateway; the files are then searched.
func TestFileBatchesThroughTheGateway(t *testing.T) {
	s := newResponsesStack(t)
	ctx := context.Background()
	c := s.client()
	vs, err := c.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("handbook")})
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{
		"depot.md":   "# Depot\n\nThe depot opens at seven and closes at midnight.\n",
		"fares.txt":  "Fares: a single ticket costs two euros; children travel free.\n",
		"routes.csv": "route,terminus\n1,harbour\n2,airport\n",
	}
	var uploads []openai.FileNewParams
	for name, text := range docs {
		uploads = append(uploads, openai.FileNewParams{
			File:    openai.File(strings.NewReader(text), name, "text/plain"),
			Purpose: openai.FilePurposeAssistants,
		})
	}
	batch, err := c.VectorStores.FileBatches.UploadAndPoll(ctx, vs.ID, uploads, nil, 20)
	if err != nil {
		t.Fatal(err)
	}
	if batch.Status != openai.VectorStoreFileBatchStatusCompleted || batch.VectorStoreID != vs.ID ||
		batch.FileCounts.Completed != 3 || batch.FileCounts.Total != 3 || batch.FileCounts.Failed != 0 {
		t.Fatalf("batch %+v", batch)
	}
	files, err := c.VectorStores.FileBatches.ListFiles(ctx, vs.ID, batch.ID, openai.VectorStoreFileBatchListFilesParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(files.Data) != 3 {
		t.Fatalf("batch files %+v", files.Data)
	}
	names := map[string]string{}
	for _, f := range files.Data {
		if f.Status != openai.VectorStoreFileStatusCompleted {
			t.Errorf("file %s %s", f.ID, f.Status)
		}
		info, err := c.Files.Get(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		names[info.Filename] = f.ID
	}
	page, err := c.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
		Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("single ticket fares")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) == 0 || page.Data[0].FileID != names["fares.txt"] || !strings.Contains(page.Data[0].Content[0].Text, "two euros") {
		t.Fatalf("search: %+v", page.Data)
	}

	// NewAndPoll with per-file attributes on files already uploaded.
	extra, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader("Lost property is kept at the depot for a month.\n"), "lost.txt", "text/plain"),
		Purpose: openai.FilePurposeAssistants,
	})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := c.VectorStores.FileBatches.NewAndPoll(ctx, vs.ID, openai.VectorStoreFileBatchNewParams{
		Files: []openai.VectorStoreFileBatchNewParamsFile{{FileID: extra.ID,
			Attributes: map[string]openai.VectorStoreFileBatchNewParamsFileAttributeUnion{"desk": {OfString: openai.String("lost")}}}},
	}, 20)
	if err != nil {
		t.Fatal(err)
	}
	if b2.Status != openai.VectorStoreFileBatchStatusCompleted || b2.FileCounts.Completed != 1 {
		t.Fatalf("second batch %+v", b2)
	}
	got, err := c.VectorStores.Files.Get(ctx, vs.ID, extra.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attributes["desk"].OfString != "lost" {
		t.Errorf("attributes %+v", got.Attributes)
	}

	// Another owner cannot read the batch.
	other := s.client(option.WithAPIKey(s.otherKey(t, "enterprise")))
	_, err = other.VectorStores.FileBatches.Get(ctx, vs.ID, batch.ID)
	apiError(t, err, 404, "not_found")
}

// TestCodeInterpreterThroughTheGateway: the fake model asks to run "sample"
// (its placeholder argument); the sandbox runs it and the NameError comes
// back to the model. Where the host cannot isolate code (not root), the tool
// is refused by name instead.
func TestCodeInterpreterThroughTheGateway(t *testing.T) {
	s := newResponsesStack(t)
	ctx := context.Background()
	c := s.client()
	params := responses.ResponseNewParams{
		Model: "demo/chat",
		Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
			Container: responses.ToolCodeInterpreterContainerUnionParam{
				OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}}}}},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs},
		Input:   responses.ResponseNewParamsInputUnion{OfString: openai.String("compute something")},
	}
	r, err := c.Responses.New(ctx, params)
	if sandboxErr := sandboxUnavailable(); sandboxErr != "" {
		if e := apiError(t, err, 400, "invalid_value"); e.Param != "tools" {
			t.Errorf("param %q", e.Param)
		}
		t.Skipf("sandbox unavailable here (%s): refused with a 400 as it should be", sandboxErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var ran bool
	for _, item := range r.Output {
		if item.Type == "code_interpreter_call" {
			ci := item.AsCodeInterpreterCall()
			logs := ""
			for _, o := range ci.Outputs {
				logs += o.Logs
			}
			ran = ci.Status == "completed" && ci.Code == "sample" && strings.Contains(logs, "NameError")
		}
	}
	if !ran || !strings.Contains(r.OutputText(), "NameError") {
		t.Errorf("code_interpreter: ran %v, text %q, output %+v", ran, r.OutputText(), r.Output)
	}
}

// sandboxUnavailable says why the sandbox cannot run here, "" when it can.
func sandboxUnavailable() string {
	r, err := sandbox.New(sandbox.Options{})
	if err != nil {
		return err.Error()
	}
	if err := r.Available(); err != nil {
		return err.Error()
	}
	return ""
}
