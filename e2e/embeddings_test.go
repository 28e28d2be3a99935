package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

// TestEmbeddings drives POST /v1/embeddings with the official SDK on an
// OpenAI-compatible provider (passthrough) and a Gemini one (translated),
// in both encodings.
func TestEmbeddings(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	inputs := []string{"the first text", "a second, different text", "the first text"}

	for _, model := range []string{"vendor/embed", "vendor/gemini-embed"} {
		t.Run(model, func(t *testing.T) {
			get := func(t *testing.T, format openai.EmbeddingNewParamsEncodingFormat, dims int64) *openai.CreateEmbeddingResponse {
				t.Helper()
				p := openai.EmbeddingNewParams{
					Model:          model,
					Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
					EncodingFormat: format,
				}
				if dims > 0 {
					p.Dimensions = openai.Int(dims)
				}
				res, err := c.Embeddings.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			for _, dims := range []int64{0, 256} {
				floats := get(t, openai.EmbeddingNewParamsEncodingFormatFloat, dims)
				b64 := get(t, openai.EmbeddingNewParamsEncodingFormatBase64, dims)
				if !strings.Contains(b64.RawJSON(), `"embedding":"`) || strings.Contains(floats.RawJSON(), `"embedding":"`) {
					t.Fatalf("encodings not as asked: float %.80s... base64 %.80s...", floats.RawJSON(), b64.RawJSON())
				}
				// The schema knows only the float form (embedding: array).
				validateSchema(t, "CreateEmbeddingResponse", []byte(floats.RawJSON()))
				for _, r := range []*openai.CreateEmbeddingResponse{floats, b64} {
					if len(r.Data) != len(inputs) || r.Usage.PromptTokens == 0 || r.Usage.TotalTokens != r.Usage.PromptTokens {
						t.Fatalf("%d embeddings, usage %+v", len(r.Data), r.Usage)
					}
				}
				for i := range inputs {
					f, b := floats.Data[i], b64.Data[i]
					if f.Index != int64(i) || b.Index != int64(i) || len(f.Embedding) == 0 || len(f.Embedding) != len(b.Embedding) {
						t.Fatalf("embedding %d: index %d/%d, %d/%d values", i, f.Index, b.Index, len(f.Embedding), len(b.Embedding))
					}
					if dims > 0 && len(f.Embedding) != int(dims) {
						t.Errorf("%d values, want %d", len(f.Embedding), dims)
					}
					// base64 is little-endian float32: the SDK decodes it
					// to exactly the values the float form rounds to.
					for k := range f.Embedding {
						if fv, bv := f.Embedding[k], b.Embedding[k]; float32(fv) != float32(bv) || float64(float32(bv)) != bv {
							t.Fatalf("embedding %d value %d: float %v, base64 %v", i, k, fv, bv)
						}
					}
				}
				// Order is kept: equal inputs, equal vectors; different
				// inputs, different vectors.
				if floats.Data[0].Embedding[0] != floats.Data[2].Embedding[0] || floats.Data[0].Embedding[0] == floats.Data[1].Embedding[0] {
					t.Error("vectors not in input order")
				}
			}
		})
	}

	t.Run("single string and token input", func(t *testing.T) {
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/embed",
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("just one")}})
		if err != nil || len(res.Data) != 1 {
			t.Fatalf("%v %+v", err, res)
		}
		res, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/embed",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{15339, 1917}}})
		if err != nil || len(res.Data) != 1 || res.Usage.PromptTokens != 2 {
			t.Fatalf("%v %+v", err, res)
		}
	})

	t.Run("long input truncated to the context window", func(t *testing.T) {
		long := strings.Repeat("Embeddings of long documents are cut at the model's limit. ", 1200) // ~13k tokens
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/embed",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"short", long}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 2 {
			t.Fatalf("%d embeddings", len(res.Data))
		}
		var sent struct{ Input []string }
		if err := json.Unmarshal(vs.lastRequest(t, "openai").body, &sent); err != nil || len(sent.Input) != 2 {
			t.Fatalf("upstream body: %v", err)
		}
		tk, err := tokenizer.For(tokenizer.CL100KBase)
		if err != nil {
			t.Fatal(err)
		}
		if n := tk.Count(sent.Input[1]); n != 8191 || !strings.HasPrefix(long, sent.Input[1]) || sent.Input[0] != "short" {
			t.Errorf("upstream input: %d tokens (want 8191), prefix %v", n, strings.HasPrefix(long, sent.Input[1]))
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/embed-fixed", Dimensions: openai.Int(64),
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
		if e := apiError(t, err, http.StatusBadRequest, "unsupported_parameter"); e.Param != "dimensions" {
			t.Errorf("param %q", e.Param)
		}
		_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/gpt",
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
		apiError(t, err, http.StatusNotFound, "model_not_supported")
		_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/nothing",
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
		apiError(t, err, http.StatusNotFound, "model_not_found")
		resp, body := vs.post(t, "/embeddings", vs.key, []byte(`{"model":"vendor/embed","input":[]}`))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"param":"input"`) {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
		validateSchema(t, "ErrorResponse", body)
		// Gemini embeds text only.
		_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "vendor/gemini-embed",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2}}})
		if e := apiError(t, err, http.StatusBadRequest, "invalid_value"); e.Param != "input" {
			t.Errorf("param %q", e.Param)
		}
	})
}
