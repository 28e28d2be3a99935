package config

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yaml.v3 reports type mismatches as "line N: cannot unmarshal !!tag `value`
// into go.Type" and unknown fields as "line N: field x not found in type
// config.T": Go's names, not the operator's. decodeErrors rewrites each into
// an Error with the field path and a hint.
var (
	unmarshalRE = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) `?(.*?)`? into (.+)$")
	unknownRE   = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (.+)$`)
)

func decodeErrors(file string, root *yaml.Node, err error) []error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []error{fmt.Errorf("%s: %w", file, err)}
	}
	out := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		e := &Error{File: file, Field: "(file)", Msg: msg}
		if m := unknownRE.FindStringSubmatch(msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Field = fieldName(pathAtLine(root, e.Line, nil))
			e.Msg = fmt.Sprintf("unknown field %q (check its spelling and indentation)", m[2])
		} else if m := unmarshalRE.FindStringSubmatch(msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Field = fieldName(pathAtLine(root, e.Line, nil))
			e.Msg = typeHint(m[2], m[3], m[4])
		}
		out = append(out, e)
	}
	return out
}

// typeHint says what a value of the Go type goType looks like in YAML.
func typeHint(tag, value, goType string) string {
	got := fmt.Sprintf("%q", value)
	if tag == "map" || tag == "seq" {
		got = map[string]string{"map": "a mapping", "seq": "a list"}[tag]
	}
	switch {
	case goType == "time.Duration":
		return got + " is not a duration (durations look like 30s, 1m30s or 500ms)"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return got + " is not a whole number (write digits only, such as 1048576)"
	case strings.HasPrefix(goType, "float"):
		return got + " is not a number (such as 0.25)"
	case goType == "bool":
		return got + " is not true or false"
	case goType == "string":
		return got + " must be a string (quote it)"
	case strings.HasPrefix(goType, "[]"):
		return got + " must be a list (items start with \"- \")"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "config."), strings.HasPrefix(goType, "*config."):
		return got + " must be a mapping of fields (key: value lines, indented)"
	}
	return got + " has the wrong type"
}

// pathAtLine returns the path (map keys and sequence indexes) of the
// deepest key or item that starts on line.
func pathAtLine(n *yaml.Node, line int, path []any) []any {
	if n == nil {
		return path
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return pathAtLine(n.Content[0], line, path)
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := append(append([]any(nil), path...), k.Value)
			if k.Line == line {
				if deeper := pathAtLine(v, line, p); len(deeper) > len(p) {
					return deeper
				}
				return p
			}
			if startsBefore(v, line) && endsAfter(n, i+2, line) {
				return pathAtLine(v, line, p)
			}
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			p := append(append([]any(nil), path...), i)
			if item.Line == line && item.Kind != yaml.MappingNode {
				return p
			}
			if item.Line <= line && (i+1 == len(n.Content) || n.Content[i+1].Line > line) {
				return pathAtLine(item, line, p)
			}
		}
	}
	return path
}

func startsBefore(n *yaml.Node, line int) bool { return n.Line <= line }

// endsAfter reports whether the mapping entry that ends before
// n.Content[next] still covers line.
func endsAfter(n *yaml.Node, next, line int) bool {
	return next >= len(n.Content) || n.Content[next].Line > line
}

// sortByLine orders errors by their line in the file, keeping the order of
// errors without one.
func sortByLine(errs []error) {
	line := func(e error) int {
		var ce *Error
		if errors.As(e, &ce) {
			return ce.Line
		}
		return 0
	}
	sort.SliceStable(errs, func(i, j int) bool { return line(errs[i]) < line(errs[j]) })
}
