package fake

import (
	"encoding/json"
	"math"
	"strings"
)

// Beyond shallowDepth nested schemas (and $ref) sampleJSON leaves out
// optional properties and gives arrays only their minItems, so that a
// recursive schema still yields a finite value; maxSampleDepth stops one
// whose required members recur (null then).
const (
	shallowDepth   = 4
	maxSampleDepth = 32
)

// sampleJSON returns a deterministic value that validates against the JSON
// Schema schema (OpenAI's subset, Gemini's upper-case type names too):
// objects with every declared property (required ones absent from
// properties too), strings "sample" (a few formats get a valid example,
// minLength and maxLength are met), numbers and integers 1 moved into their
// bounds, booleans true, enum and const their (first) value, arrays one item
// (or minItems), anyOf and oneOf their first branch, allOf merged objects,
// $ref into $defs or definitions. A root object without properties that
// allows others gets "answer": text, so that JSON mode answers something,
// when answer is set or the schema says additionalProperties true (JSON
// mode through a forced tool); tool arguments are otherwise left {}.
func sampleJSON(schema json.RawMessage, answer bool, text string) any {
	var root any
	if len(schema) == 0 || json.Unmarshal(schema, &root) != nil {
		root = map[string]any{"type": "object"}
	}
	s := sampler{root: root, answer: answer, text: text}
	return s.value(root, 0)
}

type sampler struct {
	root   any
	answer bool
	text   string
}

func (s *sampler) value(schema any, depth int) any {
	m, ok := schema.(map[string]any)
	if !ok || depth > maxSampleDepth {
		return nil // true, {} at the limit, or a malformed schema: null is as good as any
	}
	if ref, ok := m["$ref"].(string); ok {
		return s.value(s.resolve(ref), depth+1)
	}
	if c, ok := m["const"]; ok {
		return c
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if branches, ok := m[k].([]any); ok && len(branches) > 0 {
			return s.value(branches[0], depth+1)
		}
	}
	if all, ok := m["allOf"].([]any); ok && len(all) > 0 {
		merged := map[string]any{}
		for _, b := range all {
			if v, ok := s.value(b, depth+1).(map[string]any); ok {
				for k, x := range v {
					merged[k] = x
				}
			}
		}
		return merged
	}
	switch schemaType(m) {
	case "object":
		return s.object(m, depth)
	case "array":
		n := 1
		if depth > shallowDepth {
			n = 0
		}
		if mi, ok := m["minItems"].(float64); ok && int(mi) > n {
			n = int(mi)
		}
		if ma, ok := m["maxItems"].(float64); ok && int(ma) < n {
			n = int(ma)
		}
		items := make([]any, n)
		for i := range items {
			items[i] = s.value(m["items"], depth+1)
		}
		return items
	case "string":
		return sampleString(m)
	case "integer":
		return math.Ceil(sampleNumber(m, true))
	case "number":
		return sampleNumber(m, false)
	case "boolean":
		return true
	case "null":
		return nil
	}
	return "sample" // no type: any value
}

func (s *sampler) object(m map[string]any, depth int) map[string]any {
	out := map[string]any{}
	props, _ := m["properties"].(map[string]any)
	req, _ := m["required"].([]any)
	for _, r := range req {
		if name, ok := r.(string); ok {
			if p, ok := props[name]; ok {
				out[name] = s.value(p, depth+1)
			} else {
				out[name] = "sample"
			}
		}
	}
	if depth <= shallowDepth {
		for name, p := range props {
			if _, done := out[name]; !done {
				out[name] = s.value(p, depth+1)
			}
		}
	}
	// JSON mode asked through a tool (Anthropic's, from the gateway) says
	// additionalProperties true outright.
	open := m["additionalProperties"] != false && (s.answer || m["additionalProperties"] == true)
	if depth == 0 && len(out) == 0 && open {
		out["answer"] = s.text
	}
	return out
}

// resolve follows a local $ref (#/$defs/x, #/definitions/x, any JSON
// pointer into the root).
func (s *sampler) resolve(ref string) any {
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil
	}
	cur := s.root
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[tok]
	}
	return cur
}

// schemaType is the schema's type, lower case (Gemini writes OBJECT), the
// first non-null one of a list, or one inferred from the keywords.
func schemaType(m map[string]any) string {
	switch t := m["type"].(type) {
	case string:
		return strings.ToLower(t)
	case []any:
		for _, x := range t {
			if n, ok := x.(string); ok && n != "null" {
				return strings.ToLower(n)
			}
		}
		return "null"
	}
	switch {
	case m["properties"] != nil || m["required"] != nil:
		return "object"
	case m["items"] != nil:
		return "array"
	}
	return ""
}

// formatSamples are valid examples of the string formats OpenAI's
// structured outputs accept.
var formatSamples = map[string]string{
	"date-time": "2024-01-01T00:00:00Z", "date": "2024-01-01", "time": "00:00:00Z", "duration": "P1D",
	"email": "user@example.com", "hostname": "example.com", "ipv4": "192.0.2.1", "ipv6": "2001:db8::1",
	"uuid": "00000000-0000-4000-8000-000000000000", "uri": "https://example.com/",
}

func sampleString(m map[string]any) string {
	str := "sample"
	if f, ok := m["format"].(string); ok && formatSamples[f] != "" {
		return formatSamples[f]
	}
	if mi, ok := m["minLength"].(float64); ok && len(str) < int(mi) {
		str += strings.Repeat("x", int(mi)-len(str))
	}
	if ma, ok := m["maxLength"].(float64); ok && len(str) > int(ma) {
		str = str[:int(ma)]
	}
	return str
}

// sampleNumber is 1 moved into the schema's bounds.
func sampleNumber(m map[string]any, integer bool) float64 {
	v := 1.0
	step := 1.0
	if !integer {
		step = 0.5
	}
	if lo, ok := m["minimum"].(float64); ok && v < lo {
		v = lo
	}
	if lo, ok := m["exclusiveMinimum"].(float64); ok && v <= lo {
		v = lo + step
	}
	if hi, ok := m["maximum"].(float64); ok && v > hi {
		v = hi
	}
	if hi, ok := m["exclusiveMaximum"].(float64); ok && v >= hi {
		v = hi - step
	}
	if integer {
		v = math.Ceil(v)
	}
	return v
}

// sampleText renders sampleJSON's value as the reply text: indented, so
// that it streams in several pieces, and with sorted keys (encoding/json
// sorts map keys), so that it is deterministic.
func sampleText(schema json.RawMessage, text string) string {
	b, err := json.MarshalIndent(sampleJSON(schema, true, text), "", " ")
	if err != nil { // cannot happen: only JSON values
		panic(err)
	}
	return string(b)
}
