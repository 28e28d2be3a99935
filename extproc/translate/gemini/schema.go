package gemini

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// maxSchemaDepth bounds nesting (and $ref expansion), which Gemini limits
// far more tightly anyway.
const maxSchemaDepth = 64

// schemaConverter rewrites a JSON Schema (response_format's or a function's
// parameters) into Gemini's Schema, the OpenAPI 3.0 subset described in the
// package documentation.
type schemaConverter struct {
	r    *request
	root gjson.Result // for $ref
	// order adds propertyOrdering (response schemas), so that JSON output
	// keeps the client's property order instead of Gemini's alphabetical one.
	order bool
	refs  []string // $refs being expanded, to refuse recursion
}

// schema appends the conversion of s, an object.
func (c *schemaConverter) schema(dst []byte, s gjson.Result, param string, depth int) ([]byte, error) {
	if !s.IsObject() {
		return dst, apierror.InvalidParam(param, "Invalid '%s': expected a JSON Schema object.", param)
	}
	if depth > maxSchemaDepth {
		return dst, apierror.InvalidParam(param, "Invalid '%s': the schema is nested too deeply.", param)
	}
	dst = append(dst, '{')
	n := 0
	var err error
	dst, n, err = c.members(dst, s, param, depth, n, nil)
	if err != nil {
		return dst, err
	}
	if c.order && !s.Get("propertyOrdering").Exists() {
		props := s.Get("properties")
		if ref := s.Get(`\$ref`); !props.Exists() && ref.Type == gjson.String {
			if def, ok := c.resolve(ref.Str); ok {
				props = def.Get("properties")
			}
		}
		if props.IsObject() && !isEmpty(props) {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `"propertyOrdering":[`...)
			k := 0
			props.ForEach(func(key, _ gjson.Result) bool {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, key.Raw...)
				k++
				return true
			})
			dst = append(dst, ']')
		}
	}
	return append(dst, '}'), nil
}

// members appends the converted keywords of s (n of them are written
// already), skipping those skip reports: the siblings of a $ref win over the
// referenced schema's own keywords.
func (c *schemaConverter) members(dst []byte, s gjson.Result, param string, depth, n int, skip func(string) bool) ([]byte, int, error) {
	var err error
	key := func(k string) {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, `":`...)
		n++
	}
	s.ForEach(func(k, v gjson.Result) bool {
		kw := k.Str
		if skip != nil && skip(kw) {
			return true
		}
		p := param + "." + kw
		switch kw {
		case "type":
			var typ string
			var nullable bool
			if typ, nullable, err = c.typ(v, p); err != nil || typ == "" {
				return err == nil
			}
			key("type")
			dst = append(dst, '"')
			dst = append(dst, typ...)
			dst = append(dst, '"')
			if nullable && !s.Get("nullable").Exists() {
				key("nullable")
				dst = append(dst, "true"...)
			}
		case "properties":
			if !v.IsObject() {
				err = apierror.InvalidParam(p, "Invalid '%s': expected an object.", p)
				return false
			}
			key("properties")
			dst = append(dst, '{')
			m := 0
			v.ForEach(func(name, sub gjson.Result) bool {
				if m > 0 {
					dst = append(dst, ',')
				}
				m++
				dst = append(dst, name.Raw...)
				dst = append(dst, ':')
				dst, err = c.schema(dst, sub, p+"."+name.Str, depth+1)
				return err == nil
			})
			dst = append(dst, '}')
		case "items":
			if !v.IsObject() {
				err = c.r.unsupportedValue(p, "Gemini schemas take a single schema for array items.")
				return err == nil
			}
			key("items")
			dst, err = c.schema(dst, v, p, depth+1)
		case "anyOf", "oneOf":
			// Gemini has anyOf only. For generating a value, one of several
			// alternatives and at least one of them amount to the same.
			if !v.IsArray() {
				err = apierror.InvalidParam(p, "Invalid '%s': expected an array.", p)
				return false
			}
			// {"type":"null"} alternatives (Optional[X] in most schema
			// generators) become nullable, and a single remaining
			// alternative is merged into this schema.
			var alts []gjson.Result
			var altIdx []int
			null := false
			k := 0
			v.ForEach(func(_, sub gjson.Result) bool {
				if isNullSchema(sub) {
					null = true
				} else {
					alts = append(alts, sub)
					altIdx = append(altIdx, k)
				}
				k++
				return true
			})
			if len(alts) == 1 && alts[0].IsObject() {
				sibling := func(k string) bool { return k != kw && s.Get(gjson.Escape(k)).Exists() }
				dst, n, err = c.members(dst, alts[0], p+"["+strconv.Itoa(altIdx[0])+"]", depth+1, n, sibling)
			} else if len(alts) > 0 {
				key("anyOf")
				dst = append(dst, '[')
				for m, sub := range alts {
					if m > 0 {
						dst = append(dst, ',')
					}
					if dst, err = c.schema(dst, sub, p+"["+strconv.Itoa(altIdx[m])+"]", depth+1); err != nil {
						break
					}
				}
				dst = append(dst, ']')
			}
			if null && err == nil && !s.Get("nullable").Exists() {
				key("nullable")
				dst = append(dst, "true"...)
			}
		case "enum":
			if !v.IsArray() || !allStrings(v) {
				err = c.r.unsupportedValue(p, "Gemini schemas only take enums of strings.")
				return err == nil
			}
			key("enum")
			dst = append(dst, v.Raw...)
		case "const":
			if v.Type != gjson.String {
				err = c.r.unsupportedValue(p, "Gemini schemas only take string constants.")
				return err == nil
			}
			if s.Get("enum").Exists() {
				return true
			}
			key("enum")
			dst = append(dst, '[')
			dst = append(dst, v.Raw...)
			dst = append(dst, ']')
		case "format":
			if !supportedFormat(v.Str) {
				return true // an annotation Gemini would reject; dropping it loses no shape
			}
			key("format")
			dst = append(dst, v.Raw...)
		case "$ref":
			dst, n, err = c.ref(dst, s, v, p, depth, n)
		case "description", "title", "nullable", "required", "minItems", "maxItems", "minimum", "maximum",
			"minLength", "maxLength", "minProperties", "maxProperties", "pattern", "example", "default", "propertyOrdering":
			key(kw)
			dst = append(dst, v.Raw...)
		case "additionalProperties":
			if v.Type != gjson.False {
				err = c.r.unsupportedValue(p, "Gemini schemas cannot allow properties beyond those declared.")
			}
		case "$schema", "$id", "$comment", "$defs", "definitions", "examples", "deprecated", "readOnly", "writeOnly", "strict":
			// Annotations, and definitions reached through $ref.
		default:
			err = c.r.unsupportedValue(p, "Gemini schemas do not support the '"+kw+"' keyword.")
		}
		return err == nil
	})
	return dst, n, err
}

// typ converts a JSON Schema type: a name, or a name with "null".
func (c *schemaConverter) typ(v gjson.Result, p string) (typ string, nullable bool, err error) {
	if v.Type == gjson.String {
		t := upperType(v.Str)
		if t == "" {
			return "", false, c.r.unsupportedValue(p, "Gemini schemas do not support type "+v.Raw+".")
		}
		return t, false, nil
	}
	if v.IsArray() {
		v.ForEach(func(_, t gjson.Result) bool {
			switch {
			case t.Str == "null":
				nullable = true
			case typ == "":
				typ = upperType(t.Str)
				if typ == "" {
					typ = "-"
				}
			default:
				typ = "-" // several non-null types
			}
			return true
		})
		if typ != "" && typ != "-" {
			return typ, nullable, nil
		}
	}
	return "", false, c.r.unsupportedValue(p, "Gemini schemas take one type, optionally with \"null\".")
}

func upperType(t string) string {
	switch t {
	case "string":
		return "STRING"
	case "number":
		return "NUMBER"
	case "integer":
		return "INTEGER"
	case "boolean":
		return "BOOLEAN"
	case "array":
		return "ARRAY"
	case "object":
		return "OBJECT"
	}
	return ""
}

// supportedFormat reports the formats Gemini's Schema accepts; it rejects
// the others (uri, email, uuid, ...) outright.
func supportedFormat(f string) bool {
	switch f {
	case "enum", "date-time", "float", "double", "int32", "int64":
		return true
	}
	return false
}

func allStrings(v gjson.Result) bool {
	ok := true
	v.ForEach(func(_, e gjson.Result) bool { ok = e.Type == gjson.String; return ok })
	return ok
}

// ref inlines a local reference into the schema's $defs or definitions,
// merging the referenced keywords under those of the referring schema.
func (c *schemaConverter) ref(dst []byte, s, ref gjson.Result, p string, depth, n int) ([]byte, int, error) {
	target := ref.Str
	if !strings.HasPrefix(target, "#/$defs/") && !strings.HasPrefix(target, "#/definitions/") {
		return dst, n, c.r.unsupportedValue(p, "Gemini schemas only support references into the schema's own $defs.")
	}
	for _, seen := range c.refs {
		if seen == target {
			return dst, n, c.r.unsupportedValue(p, "Gemini schemas cannot be recursive.")
		}
	}
	def, ok := c.resolve(target)
	if !ok {
		return dst, n, apierror.InvalidParam(p, "Invalid '%s': %s does not resolve to a schema.", p, ref.Raw)
	}
	if depth > maxSchemaDepth {
		return dst, n, apierror.InvalidParam(p, "Invalid '%s': the schema is nested too deeply.", p)
	}
	c.refs = append(c.refs, target)
	defer func() { c.refs = c.refs[:len(c.refs)-1] }()
	sibling := func(k string) bool { return k != "$ref" && s.Get(gjson.Escape(k)).Exists() }
	return c.members(dst, def, p, depth+1, n, sibling)
}

// resolve finds the schema a local reference such as "#/$defs/Name" names.
func (c *schemaConverter) resolve(ref string) (gjson.Result, bool) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return gjson.Result{}, false
	}
	// A JSON pointer: "/"-separated, with "~1" for "/" and "~0" for "~".
	var path strings.Builder
	for i, tok := range strings.Split(rest, "/") {
		if i > 0 {
			path.WriteByte('.')
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		path.WriteString(gjson.Escape(tok))
	}
	def := c.root.Get(path.String())
	return def, def.IsObject()
}

// isNullSchema reports whether s is {"type":"null"}.
func isNullSchema(s gjson.Result) bool {
	only := true
	s.ForEach(func(k, v gjson.Result) bool {
		only = k.Str == "type" && v.Str == "null"
		return only
	})
	return only && s.IsObject() && !isEmpty(s)
}
