package vectorstores

import (
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Attribute filters of a search (OpenAI's ComparisonFilter and
// CompoundFilter), evaluated on each vector store file's attributes.
// Comparisons: eq and ne on strings, numbers and booleans; gt, gte, lt and
// lte on two numbers or two strings (lexicographic); in and nin against an
// array. A missing attribute equals nothing: eq, gt… and in are false for
// it, ne and nin true.

// maxFilterDepth bounds nesting of compound filters.
const maxFilterDepth = 8

type filter struct {
	op    string // a comparison, or "and" / "or"
	key   string
	value gjson.Result
	subs  []*filter
}

func parseFilter(v gjson.Result, param string, depth int) (*filter, *apierror.Error) {
	if !v.IsObject() {
		return nil, apierror.InvalidParam(param, "Invalid '%s': expected an object.", param)
	}
	if depth > maxFilterDepth {
		return nil, apierror.InvalidParam(param, "Filters may be nested at most %d levels deep.", maxFilterDepth)
	}
	op := v.Get("type").Str
	switch op {
	case "and", "or":
		subs := v.Get("filters")
		if !subs.IsArray() || len(subs.Array()) == 0 {
			return nil, apierror.InvalidParam(param+".filters", "Invalid '%s.filters': expected a non-empty array of filters.", param)
		}
		f := &filter{op: op}
		for i, sub := range subs.Array() {
			sf, aerr := parseFilter(sub, fmt.Sprintf("%s.filters[%d]", param, i), depth+1)
			if aerr != nil {
				return nil, aerr
			}
			f.subs = append(f.subs, sf)
		}
		return f, nil
	case "eq", "ne", "gt", "gte", "lt", "lte", "in", "nin":
	default:
		return nil, apierror.InvalidParam(param+".type", "Invalid value: '%s'. Supported values are: 'eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'nin', 'and' and 'or'.", op)
	}
	key, val := v.Get("key"), v.Get("value")
	if key.Type != gjson.String || key.Str == "" {
		return nil, apierror.MissingParam(param + ".key")
	}
	switch {
	case !val.Exists() || val.Type == gjson.Null:
		return nil, apierror.MissingParam(param + ".value")
	case op == "in" || op == "nin":
		if !val.IsArray() {
			return nil, apierror.InvalidParam(param+".value", "Invalid '%s.value': '%s' takes an array.", param, op)
		}
	case val.IsArray() || val.IsObject():
		return nil, apierror.InvalidParam(param+".value", "Invalid '%s.value': expected a string, a number or a boolean.", param)
	}
	return &filter{op: op, key: key.Str, value: val}, nil
}

// match reports whether attrs (an object, or absent) passes the filter.
func (f *filter) match(attrs gjson.Result) bool {
	switch f.op {
	case "and":
		for _, s := range f.subs {
			if !s.match(attrs) {
				return false
			}
		}
		return true
	case "or":
		for _, s := range f.subs {
			if s.match(attrs) {
				return true
			}
		}
		return false
	}
	var a gjson.Result
	found := false
	attrs.ForEach(func(k, v gjson.Result) bool {
		if k.Str == f.key {
			a, found = v, true
			return false
		}
		return true
	})
	switch f.op {
	case "eq":
		return found && equal(a, f.value)
	case "ne":
		return !found || !equal(a, f.value)
	case "in", "nin":
		in := false
		if found {
			for _, v := range f.value.Array() {
				in = in || equal(a, v)
			}
		}
		return in == (f.op == "in")
	}
	if !found {
		return false
	}
	var c int
	switch {
	case a.Type == gjson.Number && f.value.Type == gjson.Number:
		c = cmpFloat(a.Num, f.value.Num)
	case a.Type == gjson.String && f.value.Type == gjson.String:
		c = cmpString(a.Str, f.value.Str)
	default:
		return false
	}
	switch f.op {
	case "gt":
		return c > 0
	case "gte":
		return c >= 0
	case "lt":
		return c < 0
	default: // lte
		return c <= 0
	}
}

func equal(a, b gjson.Result) bool {
	switch {
	case a.Type == gjson.Number && b.Type == gjson.Number:
		return a.Num == b.Num
	case a.Type == gjson.String && b.Type == gjson.String:
		return a.Str == b.Str
	case a.IsBool() && b.IsBool():
		return a.Bool() == b.Bool()
	}
	return false
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
