package apischema

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// loadSpec returns the shared Validator, skipping the test when the spec is not
// checked out beside the repository.
func loadSpec(t testing.TB) *Validator {
	t.Helper()
	p, ok := Find()
	if !ok {
		specMissing(t, p)
	}
	v, err := Load(p)
	if err != nil {
		t.Fatalf("Load(%s): %v", p, err)
	}
	return v
}

// specMissing fails the test in CI, where the spec is always checked out
// beside the repository, and skips it elsewhere, saying where it looked.
func specMissing(t testing.TB, looked string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("OpenAI spec not found in CI: looked for %s (set %s to its path)", looked, EnvSpec)
	}
	t.Skipf("OpenAI spec not found: looked for %s (set %s to its path)", looked, EnvSpec)
}

const chatCompletion = `{
  "id": "chatcmpl-123",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [{
    "index": 0,
    "message": {"role": "assistant", "content": "Hello there.", "refusal": null, "annotations": []},
    "logprobs": null,
    "finish_reason": "stop"
  }],
  "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
  "system_fingerprint": "fp_123"
}`

func TestValidate(t *testing.T) {
	v := loadSpec(t)
	tests := []struct {
		name   string
		schema string
		doc    string
		ok     bool
	}{
		{"error response", "ErrorResponse",
			`{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, true},
		{"error missing message", "ErrorResponse",
			`{"error":{"type":"invalid_request_error","param":null,"code":null}}`, false},
		{"error code wrong type", "ErrorResponse",
			`{"error":{"message":"m","type":"t","param":null,"code":42}}`, false},
		{"chat completion", "CreateChatCompletionResponse", chatCompletion, true},
		{"chat completion missing logprobs", "CreateChatCompletionResponse",
			`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,
			  "message":{"role":"assistant","content":"hi","refusal":null},"finish_reason":"stop"}]}`, false},
		{"chat completion float created", "CreateChatCompletionResponse",
			`{"id":"x","object":"chat.completion","created":1.5,"model":"m","choices":[]}`, false},
		{"stream chunk", "CreateChatCompletionStreamResponse",
			`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m",
			  "choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.Validate(tt.schema, []byte(tt.doc))
			if tt.ok && err != nil {
				t.Fatalf("want valid, got %v", err)
			}
			if !tt.ok {
				var verr *jsonschema.ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("want a *jsonschema.ValidationError, got %v", err)
				}
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	v := loadSpec(t)
	if err := v.Validate("NoSuchSchema", []byte(`{}`)); !errors.Is(err, ErrNoSchema) {
		t.Errorf("unknown schema: got %v, want ErrNoSchema", err)
	}
	if err := v.Validate("ErrorResponse", []byte(`{"error":`)); err == nil {
		t.Error("truncated JSON: got nil error")
	}
}

func TestLoadShared(t *testing.T) {
	v := loadSpec(t)
	v2, err := Load(v.Path())
	if err != nil || v2 != v {
		t.Fatalf("second Load = %p, %v; want the same Validator %p", v2, err, v)
	}
}

// TestConcurrent exercises the compile cache under the race detector.
func TestConcurrent(t *testing.T) {
	v := loadSpec(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := []string{"ErrorResponse", "CreateChatCompletionResponse"}[i%2]
			doc := map[string]string{
				"ErrorResponse":                `{"error":{"message":"m","type":"t","param":null,"code":null}}`,
				"CreateChatCompletionResponse": chatCompletion,
			}[name]
			if err := v.Validate(name, []byte(doc)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func BenchmarkValidateChatCompletion(b *testing.B) {
	v := loadSpec(b)
	doc := []byte(chatCompletion)
	for b.Loop() {
		if err := v.Validate("CreateChatCompletionResponse", doc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFindEnv(t *testing.T) {
	t.Setenv(EnvSpec, "/nonexistent/openapi.normalized.yaml")
	if p, ok := Find(); ok || p != "/nonexistent/openapi.normalized.yaml" {
		t.Errorf("Find() = %q, %v; want the env path, false", p, ok)
	}
}

func ExampleValidator_Validate() {
	p, ok := Find()
	if !ok {
		fmt.Println("spec not found")
		return
	}
	v, err := Load(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = v.Validate("ErrorResponse", []byte(`{"error":{"type":"server_error","param":null,"code":null}}`))
	fmt.Println(err != nil)
}

// TestRecursiveSchemas: the spec's compound filters use $recursiveRef,
// which must compile, and Response (which reaches them through its tools)
// must validate a real response.
func TestRecursiveSchemas(t *testing.T) {
	path, ok := Find()
	if !ok {
		specMissing(t, path)
	}
	v, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	filter := `{"type":"and","filters":[{"type":"eq","key":"a","value":"b"},{"type":"or","filters":[{"type":"eq","key":"c","value":1}]}]}`
	if err := v.Validate("CompoundFilter", []byte(filter)); err != nil {
		t.Errorf("nested compound filter: %v", err)
	}
	if err := v.Validate("CompoundFilter", []byte(`{"type":"and","filters":[{"type":"or","filters":[{"nope":1}]}]}`)); err == nil {
		t.Error("a nested filter that is neither comparison nor compound validated")
	}
	resp := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[],"error":null,
"incomplete_details":null,"instructions":null,"metadata":{},"parallel_tool_calls":true,"temperature":1,"top_p":1,"tool_choice":"auto",
"tools":[{"type":"file_search","vector_store_ids":["vs_1"],"filters":` + filter + `}]}`
	if err := v.Validate("Response", []byte(resp)); err != nil {
		t.Errorf("Response with a compound filter: %v", err)
	}
}
