package apischema

import (
	"encoding/json"
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"
)

// componentSchemas parses the spec and returns components.schemas as
// JSON-compatible values (map[string]any, []any, string, bool, nil and
// json.Number, the number type jsonschema/v6 expects).
//
// It converts from yaml.Node rather than decoding into any and round-tripping
// through encoding/json: yaml.v3 turns mappings with non-string keys (the
// spec's response codes) into map[any]any, which json.Marshal rejects, and the
// node walk lets us skip everything outside components.schemas.
func componentSchemas(raw []byte) (map[string]any, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, errors.New("not a single YAML document")
	}
	n := lookup(root.Content[0], "components", "schemas")
	if n == nil {
		return nil, errors.New("no components.schemas")
	}
	v, err := toJSON(n)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("components.schemas is not a mapping")
	}
	for name, schema := range m {
		resolveRecursiveRefs(schema, "#/components/schemas/"+name)
	}
	return m, nil
}

// resolveRecursiveRefs rewrites draft 2019-09's $recursiveAnchor /
// $recursiveRef pair, which the spec uses for its compound filters and the
// 2020-12 compiler rejects, into a plain $ref to the component that holds
// it. With no other component re-anchoring it, that is what "#" resolves
// to, so the schemas mean the same.
func resolveRecursiveRefs(v any, self string) {
	switch n := v.(type) {
	case map[string]any:
		delete(n, "$recursiveAnchor")
		if r, ok := n["$recursiveRef"]; ok && r == "#" {
			delete(n, "$recursiveRef")
			n["$ref"] = self
		}
		for _, c := range n {
			resolveRecursiveRefs(c, self)
		}
	case []any:
		for _, c := range n {
			resolveRecursiveRefs(c, self)
		}
	}
}

// lookup follows mapping keys from n, returning nil if any is missing.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

func toJSON(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return toJSON(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			// Keys are used verbatim: in JSON every key is a string, even
			// `200` or `true`.
			v, err := toJSON(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := toJSON(c)
			if err != nil {
				return nil, err
			}
			s[i] = v
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return b, nil
		case "!!int", "!!float":
			// Re-render through float64/int64 so YAML spellings such as
			// 0x1F or 1_000 become valid JSON numbers.
			var f any
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			b, err := json.Marshal(f)
			if err != nil {
				return nil, fmt.Errorf("line %d: number %q: %w", n.Line, n.Value, err)
			}
			return json.Number(b), nil
		default:
			// !!str, and !!timestamp/!!binary, which JSON carries as strings.
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node kind %v", n.Line, n.Kind)
}
