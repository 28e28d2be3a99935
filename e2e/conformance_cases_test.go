package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tidwall/gjson"
)

// The cases of TestConformanceMatrix: each drives one feature on one
// vendor's model with the official SDK and returns why the behaviour was
// not the documented one (nil: it was). They return errors rather than
// failing t, so the matrix records every cell.

// expect is nil when ok, else the error format describes.
func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// pollEvery is how often cases poll a resource the API only offers polling
// for (batches, vector stores, background responses).
const pollEvery = 20 * time.Millisecond

// pollWithin bounds every poll; far above what a loaded machine needs.
const pollWithin = 30 * time.Second

// poll calls get until done says the resource is settled.
func poll[T any](get func() (T, error), done func(T) bool) (T, error) {
	deadline := time.Now().Add(pollWithin)
	for {
		v, err := get()
		if err != nil || done(v) {
			return v, err
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("not settled after %s: %+v", pollWithin, v)
		}
		time.Sleep(pollEvery)
	}
}

func userChat(model, text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
}

func caseChat(t *testing.T, c openai.Client, v matrixVendor) error {
	res, err := c.Chat.Completions.New(t.Context(), userChat(v.chat, "hello "+v.name))
	if err != nil {
		return err
	}
	if len(res.Choices) != 1 {
		return fmt.Errorf("%d choices", len(res.Choices))
	}
	ch := res.Choices[0]
	if err := expect(ch.Message.Content == "Echo: hello "+v.name && ch.FinishReason == "stop" && res.Model == v.chat,
		"model %q content %q finish %q", res.Model, ch.Message.Content, ch.FinishReason); err != nil {
		return err
	}
	return expect(res.Usage.PromptTokens > 0 && res.Usage.CompletionTokens > 0 &&
		res.Usage.TotalTokens == res.Usage.PromptTokens+res.Usage.CompletionTokens, "usage %+v", res.Usage)
}

func caseStreamingChat(t *testing.T, c openai.Client, v matrixVendor) error {
	p := userChat(v.chat, "stream this for "+v.name)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(t.Context(), p)
	var acc openai.ChatCompletionAccumulator
	chunks, usageChunks := 0, 0
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		chunks++
		if len(ch.Choices) == 0 {
			usageChunks++
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if len(acc.Choices) != 1 {
		return fmt.Errorf("%d choices after %d chunks", len(acc.Choices), chunks)
	}
	got := acc.Choices[0]
	if err := expect(chunks >= 3 && got.Message.Content == "Echo: stream this for "+v.name && got.FinishReason == "stop",
		"%d chunks, content %q finish %q", chunks, got.Message.Content, got.FinishReason); err != nil {
		return err
	}
	return expect(usageChunks == 1 && acc.Usage.CompletionTokens > 0, "%d usage chunks, usage %+v", usageChunks, acc.Usage)
}

func caseChatTools(t *testing.T, c openai.Client, v matrixVendor) error {
	p := userChat(v.chat, "what is the weather in Paris?")
	p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
	res, err := c.Chat.Completions.New(t.Context(), p)
	if err != nil {
		return err
	}
	msg := res.Choices[0].Message
	if res.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
		return fmt.Errorf("want one get_weather call, got finish %q calls %+v", res.Choices[0].FinishReason, msg.ToolCalls)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(msg.ToolCalls[0].Function.Arguments), &args); err != nil || args["city"] == nil {
		return fmt.Errorf("arguments %q: %v", msg.ToolCalls[0].Function.Arguments, err)
	}
	p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("sunny, 21C", msg.ToolCalls[0].ID))
	final, err := c.Chat.Completions.New(t.Context(), p)
	if err != nil {
		return err
	}
	return expect(final.Choices[0].FinishReason == "stop" && final.Choices[0].Message.Content == "The tool returned: sunny, 21C",
		"final answer %q (%s)", final.Choices[0].Message.Content, final.Choices[0].FinishReason)
}

// validates is nil when text is JSON that validates against schema.
func validates(schema, text string) error {
	s, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return err
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	if err := comp.AddResource("structured.json", s); err != nil {
		return err
	}
	sch, err := comp.Compile("structured.json")
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("the answer is not JSON: %w: %q", err, text)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("the answer does not follow the schema: %w: %s", err, text)
	}
	return nil
}

// mathSchemaMap is mathSchema (structured_test.go) as the SDK takes it.
func mathSchemaMap() (map[string]any, error) {
	var m map[string]any
	return m, json.Unmarshal([]byte(mathSchema), &m)
}

func caseJSONSchema(t *testing.T, c openai.Client, v matrixVendor) error {
	schema, err := mathSchemaMap()
	if err != nil {
		return err
	}
	p := userChat(v.chat, "solve 8x + 7 = -23")
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "math_reasoning", Strict: openai.Bool(true), Schema: schema},
	}}
	res, err := c.Chat.Completions.New(t.Context(), p)
	if err != nil {
		return err
	}
	ch := res.Choices[0]
	if err := expect(ch.FinishReason == "stop" && len(ch.Message.ToolCalls) == 0,
		"finish_reason %q, tool calls %v; want stop and none", ch.FinishReason, ch.Message.ToolCalls); err != nil {
		return err
	}
	return validates(mathSchema, ch.Message.Content)
}

func caseJSONObject(t *testing.T, c openai.Client, v matrixVendor) error {
	p := userChat(v.chat, "answer in JSON")
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	res, err := c.Chat.Completions.New(t.Context(), p)
	if err != nil {
		return err
	}
	return validates(`{"type":"object"}`, res.Choices[0].Message.Content)
}

func caseTextFormat(t *testing.T, c openai.Client, v matrixVendor) error {
	schema, err := mathSchemaMap()
	if err != nil {
		return err
	}
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: v.chat,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("solve 8x + 7 = -23")},
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "math_reasoning", Strict: openai.Bool(true), Schema: schema},
		}},
	})
	if err != nil {
		return err
	}
	if r.Status != responses.ResponseStatusCompleted {
		return fmt.Errorf("status %s", r.Status)
	}
	return validates(mathSchema, r.OutputText())
}

func caseEmbeddings(t *testing.T, c openai.Client, v matrixVendor) error {
	model := v.embed
	if model == "" {
		// No embedding model for this vendor: what its chat model answers.
		model = v.chat
	}
	inputs := []string{"the depot opens at seven", "trains leave every ten minutes"}
	res, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: model,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs}})
	if err != nil {
		return err
	}
	if len(res.Data) != len(inputs) || res.Usage.PromptTokens == 0 {
		return fmt.Errorf("%d embeddings, usage %+v", len(res.Data), res.Usage)
	}
	for i, d := range res.Data {
		if d.Index != int64(i) || len(d.Embedding) == 0 || len(d.Embedding) != len(res.Data[0].Embedding) {
			return fmt.Errorf("embedding %d: index %d, %d values", i, d.Index, len(d.Embedding))
		}
	}
	return expect(fmt.Sprint(res.Data[0].Embedding) != fmt.Sprint(res.Data[1].Embedding), "different inputs, equal vectors")
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

func caseResponses(t *testing.T, c openai.Client, v matrixVendor) error {
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: v.chat, Input: textInput("hello " + v.name), Instructions: openai.String("Be brief."),
	})
	if err != nil {
		return err
	}
	if err := expect(r.Status == responses.ResponseStatusCompleted && r.OutputText() == "Echo: hello "+v.name && r.Usage.TotalTokens > 0,
		"status %s text %q usage %+v", r.Status, r.OutputText(), r.Usage); err != nil {
		return err
	}
	got, err := c.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
	if err != nil {
		return err
	}
	return expect(got.ID == r.ID && got.OutputText() == r.OutputText(), "retrieved %s %q", got.ID, got.OutputText())
}

func caseResponsesStreaming(t *testing.T, c openai.Client, v matrixVendor) error {
	stream := c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: v.chat, Input: textInput("stream me, " + v.name)})
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
		return err
	}
	if err := expect(len(types) >= 4 && types[0] == "response.created" && types[len(types)-1] == "response.completed",
		"event order %v", types); err != nil {
		return err
	}
	return expect(deltas.String() == "Echo: stream me, "+v.name && completed == deltas.String(),
		"deltas %q, completed %q", deltas.String(), completed)
}

func caseResponsesChain(t *testing.T, c openai.Client, v matrixVendor) error {
	r1, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: v.chat, Input: textInput("first turn")})
	if err != nil {
		return err
	}
	r2, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: v.chat, Input: textInput("and again"),
		PreviousResponseID: openai.String(r1.ID)})
	if err != nil {
		return err
	}
	return expect(r1.OutputText() == "Echo: first turn" && r2.OutputText() == "Echo: and again" &&
		r2.PreviousResponseID == r1.ID && r2.Usage.InputTokens > r1.Usage.InputTokens+r1.Usage.OutputTokens,
		"r1 %q, r2 %q (previous %q), input tokens %d after %d+%d",
		r1.OutputText(), r2.OutputText(), r2.PreviousResponseID, r2.Usage.InputTokens, r1.Usage.InputTokens, r1.Usage.OutputTokens)
}

func caseResponsesFunctionTools(t *testing.T, c openai.Client, v matrixVendor) error {
	weather := responses.ToolParamOfFunction("get_weather", map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"},
	}, false)
	r1, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: v.chat, Tools: []responses.ToolUnionParam{weather},
		Input: textInput("weather in Oslo?")})
	if err != nil {
		return err
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" {
		return fmt.Errorf("output %+v, want one function_call", r1.Output)
	}
	call := r1.Output[0].AsFunctionCall()
	if call.Name != "get_weather" || !json.Valid([]byte(call.Arguments)) {
		return fmt.Errorf("call %s(%s)", call.Name, call.Arguments)
	}
	r2, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: v.chat, Tools: []responses.ToolUnionParam{weather}, PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("-3C, snow")},
			}},
		}},
	})
	if err != nil {
		return err
	}
	return expect(r2.OutputText() == "The tool returned: -3C, snow", "answer after the tool %q", r2.OutputText())
}

func caseResponsesWebSearch(t *testing.T, c openai.Client, v matrixVendor) error {
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: v.chat, Input: textInput("news?"),
		Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}},
	})
	if err != nil {
		return err
	}
	var searched, cited bool
	for _, item := range r.Output {
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
	return expect(searched && cited && strings.HasPrefix(r.OutputText(), "The tool returned:"),
		"searched %v cited %v text %q", searched, cited, r.OutputText())
}

// uploadText uploads text as an assistants file.
func uploadText(t *testing.T, c openai.Client, name, text string) (*openai.FileObject, error) {
	return c.Files.New(t.Context(), openai.FileNewParams{
		File:    openai.File(strings.NewReader(text), name, "text/plain"),
		Purpose: openai.FilePurposeAssistants,
	})
}

func caseResponsesFileSearch(t *testing.T, c openai.Client, v matrixVendor) error {
	f, err := uploadText(t, c, "timetable.txt",
		"Opening hours.\nThe depot opens at seven.\n\nA sample of the timetable: trains leave every ten minutes.\n")
	if err != nil {
		return err
	}
	store, err := c.VectorStores.New(t.Context(), openai.VectorStoreNewParams{Name: openai.String("timetable " + v.name), FileIDs: []string{f.ID}})
	if err != nil {
		return err
	}
	store, err = poll(func() (*openai.VectorStore, error) { return c.VectorStores.Get(t.Context(), store.ID) },
		func(s *openai.VectorStore) bool { return s.Status != openai.VectorStoreStatusInProgress })
	if err != nil {
		return err
	}
	if store.Status != openai.VectorStoreStatusCompleted || store.FileCounts.Completed != 1 {
		return fmt.Errorf("vector store %s, file counts %+v", store.Status, store.FileCounts)
	}
	// The fake models search for "sample"; the service runs the search.
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: v.chat, Input: textInput("when do trains leave?"),
		Tools: []responses.ToolUnionParam{{OfFileSearch: &responses.FileSearchToolParam{VectorStoreIDs: []string{store.ID}}}},
	})
	if err != nil {
		return err
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
	return expect(searched && cited && strings.Contains(r.OutputText(), "ten minutes"),
		"searched %v cited %v text %q", searched, cited, r.OutputText())
}

func caseResponsesCodeInterpreter(t *testing.T, c openai.Client, v matrixVendor) error {
	params := responses.ResponseNewParams{
		Model: v.chat, Input: textInput("compute something"),
		Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
			Container: responses.ToolCodeInterpreterContainerUnionParam{
				OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}}}}},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs},
	}
	r, err := c.Responses.New(t.Context(), params)
	if why := sandboxUnavailable(); why != "" {
		// A host limit, not the vendor's: the tool must be refused by name.
		var e *openai.Error
		if !errors.As(err, &e) || e.StatusCode != 400 || e.Param != "tools" {
			return fmt.Errorf("the sandbox cannot run here (%s), yet the tool was not refused with a 400 on tools: %v", why, err)
		}
		return fmt.Errorf("%w: the code interpreter's sandbox: %s", errHostLimited, why)
	}
	if err != nil {
		return err
	}
	// The fake models run "sample" (their placeholder argument): a
	// NameError the sandbox reports back.
	var ran bool
	for _, item := range r.Output {
		if item.Type == "code_interpreter_call" {
			ci := item.AsCodeInterpreterCall()
			var logs strings.Builder
			for _, o := range ci.Outputs {
				logs.WriteString(o.Logs)
			}
			ran = ci.Status == "completed" && ci.Code == "sample" && strings.Contains(logs.String(), "NameError")
		}
	}
	return expect(ran && strings.Contains(r.OutputText(), "NameError"), "ran %v, text %q", ran, r.OutputText())
}

// caseConversations drives the Conversations API on the vendor's model.
func caseConversations(t *testing.T, c openai.Client, v matrixVendor) error {
	ctx := t.Context()
	conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{Metadata: shared.Metadata{"vendor": v.name}})
	if err != nil {
		return err
	}
	turn := func(text string) (*responses.Response, error) {
		return c.Responses.New(ctx, responses.ResponseNewParams{Model: v.chat, Input: textInput(text),
			Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}})
	}
	r1, err := turn("first turn")
	if err != nil {
		return err
	}
	r2, err := turn("second turn")
	if err != nil {
		return err
	}
	if r1.OutputText() != "Echo: first turn" || r2.OutputText() != "Echo: second turn" || r2.Usage.InputTokens <= r1.Usage.InputTokens {
		return fmt.Errorf("turns %q, %q; input tokens %d after %d", r1.OutputText(), r2.OutputText(), r2.Usage.InputTokens, r1.Usage.InputTokens)
	}
	items, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
	if err != nil {
		return err
	}
	var texts []string
	for _, it := range items.Data {
		if it.Type != "message" {
			continue
		}
		m := it.AsMessage()
		for _, part := range m.Content {
			texts = append(texts, string(m.Role)+": "+part.Text)
		}
	}
	want := []string{"user: first turn", "assistant: Echo: first turn", "user: second turn", "assistant: Echo: second turn"}
	if fmt.Sprint(texts) != fmt.Sprint(want) {
		return fmt.Errorf("items %q, want %q", texts, want)
	}
	up, err := c.Conversations.Update(ctx, conv.ID, conversations.ConversationUpdateParams{Metadata: shared.Metadata{"vendor": v.name, "done": "yes"}})
	if err != nil {
		return err
	}
	if got, err := c.Conversations.Get(ctx, conv.ID); err != nil || got.ID != up.ID || fmt.Sprint(got.Metadata) != fmt.Sprint(up.Metadata) {
		return fmt.Errorf("retrieved %+v after update: %v", got, err)
	}
	del, err := c.Conversations.Delete(ctx, conv.ID)
	if err != nil {
		return err
	}
	if !del.Deleted {
		return fmt.Errorf("delete answered %+v", del)
	}
	_, err = c.Conversations.Get(ctx, conv.ID)
	return expect(err != nil, "the deleted conversation is still there")
}

// caseBackground drives a background response on the vendor's model.
func caseBackground(t *testing.T, c openai.Client, v matrixVendor) error {
	ctx := t.Context()
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: v.chat, Input: textInput("in the background"),
		Background: openai.Bool(true)})
	if err != nil {
		return err
	}
	if r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress && r.Status != responses.ResponseStatusCompleted {
		return fmt.Errorf("created %s", r.Status)
	}
	done, err := poll(func() (*responses.Response, error) { return c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}) },
		func(r *responses.Response) bool {
			return r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress
		})
	if err != nil {
		return err
	}
	return expect(done.Status == responses.ResponseStatusCompleted && done.OutputText() == "Echo: in the background" && done.Background,
		"settled %s, text %q, background %v", done.Status, done.OutputText(), done.Background)
}

func caseFiles(t *testing.T, c openai.Client, v matrixVendor) error {
	ctx := t.Context()
	content := []byte(batchLine("files-"+v.name, v.chat, "stored, not sent") + "\n")
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(bytes.NewReader(content), "input-"+v.name+".jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		return err
	}
	if f.Bytes != int64(len(content)) || f.Filename != "input-"+v.name+".jsonl" || f.Purpose != openai.FileObjectPurposeBatch {
		return fmt.Errorf("uploaded %+v", f)
	}
	listed := false
	for it := c.Files.ListAutoPaging(ctx, openai.FileListParams{}); it.Next(); {
		listed = listed || it.Current().ID == f.ID
	}
	if !listed {
		return fmt.Errorf("%s not listed", f.ID)
	}
	got, err := c.Files.Get(ctx, f.ID)
	if err != nil || got.Filename != f.Filename || got.Bytes != f.Bytes {
		return fmt.Errorf("retrieved %+v: %v", got, err)
	}
	resp, err := c.Files.Content(ctx, f.ID)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(body, content) {
		return fmt.Errorf("content %q (%v), want %q", body, err, content)
	}
	d, err := c.Files.Delete(ctx, f.ID)
	if err != nil || !d.Deleted {
		return fmt.Errorf("delete %+v: %v", d, err)
	}
	_, err = c.Files.Get(ctx, f.ID)
	return expect(err != nil, "the deleted file is still there")
}

func caseBatches(t *testing.T, c openai.Client, v matrixVendor) error {
	ctx := t.Context()
	in := batchLine("line-1", v.chat, "batch line one") + "\n" + batchLine("line-2", v.chat, "batch line two") + "\n"
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(in), "batch.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		return err
	}
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		return err
	}
	b, err = poll(func() (*openai.Batch, error) { return c.Batches.Get(ctx, b.ID) }, func(b *openai.Batch) bool {
		switch b.Status {
		case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusExpired, openai.BatchStatusCancelled:
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Total != 2 || b.RequestCounts.Completed != 2 || b.OutputFileID == "" {
		return fmt.Errorf("batch %s, counts %+v, output file %q", b.Status, b.RequestCounts, b.OutputFileID)
	}
	resp, err := c.Files.Content(ctx, b.OutputFileID)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := gjson.ParseBytes(sc.Bytes())
		if l.Get("response.status_code").Int() != 200 || l.Get("response.body.model").String() != v.chat {
			return fmt.Errorf("output line %s", sc.Bytes())
		}
		got[l.Get("custom_id").String()] = l.Get("response.body.choices.0.message.content").String()
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return expect(len(got) == 2 && got["line-1"] == "Echo: batch line one" && got["line-2"] == "Echo: batch line two",
		"output lines %q", got)
}

func caseVectorStores(t *testing.T, c openai.Client, v matrixVendor) error {
	ctx := t.Context()
	store, err := c.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("handbook " + v.name)})
	if err != nil {
		return err
	}
	uploads := []openai.FileNewParams{
		{File: openai.File(strings.NewReader("# Depot\n\nThe depot opens at seven and closes at midnight.\n"), "depot.md", "text/markdown"),
			Purpose: openai.FilePurposeAssistants},
		{File: openai.File(strings.NewReader("Fares: a single ticket costs two euros; children travel free.\n"), "fares.txt", "text/plain"),
			Purpose: openai.FilePurposeAssistants},
	}
	batch, err := c.VectorStores.FileBatches.UploadAndPoll(ctx, store.ID, uploads, nil, int(pollEvery.Milliseconds()))
	if err != nil {
		return err
	}
	if batch.Status != openai.VectorStoreFileBatchStatusCompleted || batch.FileCounts.Completed != 2 || batch.FileCounts.Total != 2 {
		return fmt.Errorf("file batch %s, counts %+v", batch.Status, batch.FileCounts)
	}
	page, err := c.VectorStores.Search(ctx, store.ID, openai.VectorStoreSearchParams{
		Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("single ticket fares")}})
	if err != nil {
		return err
	}
	if len(page.Data) == 0 || len(page.Data[0].Content) == 0 {
		return fmt.Errorf("search found %+v", page.Data)
	}
	return expect(page.Data[0].Filename == "fares.txt" && strings.Contains(page.Data[0].Content[0].Text, "two euros"),
		"first result %s: %q", page.Data[0].Filename, page.Data[0].Content[0].Text)
}
