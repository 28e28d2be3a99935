package fake

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validates fails unless doc validates against schema.
func validates(t *testing.T, schema, doc string) {
	t.Helper()
	s, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("schema.json", s); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("sample is not JSON: %v\n%s", err, doc)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("sample does not validate: %v\n%s", err, doc)
	}
}

func TestSampleJSON(t *testing.T) {
	tests := []struct{ name, schema, want string }{
		{"scalars", `{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number"},"i":{"type":"integer"},"b":{"type":"boolean"},"z":{"type":"null"}},
			"required":["s","n","i","b","z"],"additionalProperties":false}`,
			`{"b":true,"i":1,"n":1,"s":"sample","z":null}`},
		{"enum, const, nullable", `{"type":"object","properties":{"e":{"type":"string","enum":["red","green"]},"c":{"const":42},"o":{"type":["string","null"]}},
			"required":["e","c","o"],"additionalProperties":false}`,
			`{"c":42,"e":"red","o":"sample"}`},
		{"nested objects and arrays", `{"type":"object","properties":{"steps":{"type":"array","items":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},
			"required":["explanation","output"],"additionalProperties":false}},"final_answer":{"type":"string"}},"required":["steps","final_answer"],"additionalProperties":false}`,
			`{"final_answer":"sample","steps":[{"explanation":"sample","output":"sample"}]}`},
		{"anyOf and $defs", `{"type":"object","$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"],"additionalProperties":false}},
			"properties":{"p":{"$ref":"#/$defs/pt"},"u":{"anyOf":[{"type":"integer","minimum":5},{"type":"string"}]}},"required":["p","u"],"additionalProperties":false}`,
			`{"p":{"x":1},"u":5}`},
		{"recursive", `{"type":"object","$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name"]}},
			"properties":{"root":{"$ref":"#/$defs/node"}},"required":["root"]}`, ""},
		{"bounds and formats", `{"type":"object","properties":{"t":{"type":"string","format":"date-time"},"code":{"type":"string","minLength":10,"maxLength":12},
			"n":{"type":"number","exclusiveMinimum":3,"maximum":10},"k":{"type":"integer","maximum":0},"l":{"type":"array","items":{"type":"integer"},"minItems":2}},
			"required":["t","code","n","k","l"],"additionalProperties":false}`,
			`{"code":"samplexxxx","k":0,"l":[1,1],"n":3.5,"t":"2024-01-01T00:00:00Z"}`},
		{"allOf", `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"]}]}`,
			`{"a":"sample","b":true}`},
		{"JSON mode", `{"type":"object","additionalProperties":true}`, `{"answer":"hello"}`},
		{"Gemini's names", `{"type":"OBJECT","properties":{"n":{"type":"INTEGER"},"s":{"type":"STRING","enum":["a"]}},"required":["n","s"],"propertyOrdering":["s","n"]}`,
			`{"n":1,"s":"a"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sampleText(json.RawMessage(tt.schema), "hello")
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(got)); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, got)
			}
			if tt.want != "" && compact.String() != tt.want {
				t.Errorf("sample %s, want %s", compact.String(), tt.want)
			}
			if !strings.Contains(tt.schema, "OBJECT") {
				validates(t, tt.schema, got)
			}
			if again := sampleText(json.RawMessage(tt.schema), "hello"); again != got {
				t.Errorf("not deterministic: %s then %s", got, again)
			}
		})
	}
}
