// Package apischema owns validating JSON documents against the official
// OpenAI OpenAPI schema, for contract tests.
//
// The spec is not part of the project: it lives beside the checkout in
// ../shared/openapi/ (CI has it). Tests locate it with Find and skip when it is
// absent, load it once with Load, and check what they emit with
// Validator.Validate against a named component schema such as
// "CreateChatCompletionResponse".
//
// It reads openapi.normalized.yaml, the official spec with the OpenAPI 3.0
// `nullable: true` rewritten into JSON Schema, so a strict 2020-12 validator
// gives the answers the SDKs expect.
package apischema

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// EnvSpec names the environment variable that overrides where Find looks.
const EnvSpec = "SWITCHYARD_OPENAPI"

// specRel is where the spec sits relative to an ancestor of the working
// directory: the repository is checked out with shared/ beside it.
var specRel = filepath.Join("..", "shared", "openapi", "openapi.normalized.yaml")

// Find locates the normalized OpenAI spec. The EnvSpec variable wins when set
// (ok reports whether that file exists); otherwise it walks up from the working
// directory looking for ../shared/openapi/openapi.normalized.yaml next to each
// ancestor. When nothing is found it returns the env value or the first path
// tried, so a test can say where it looked in its skip message.
func Find() (path string, ok bool) {
	if p := os.Getenv(EnvSpec); p != "" {
		return p, isFile(p)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	first := ""
	for {
		p := filepath.Join(dir, specRel)
		if first == "" {
			first = p
		}
		if isFile(p) {
			return p, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return first, false
		}
		dir = parent
	}
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// Validator validates documents against the component schemas of one spec.
// Schemas are compiled on first use and cached. It is safe for concurrent use.
type Validator struct {
	path string

	mu       sync.Mutex // guards compiler (not concurrency-safe) and compiled
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

// loaded caches validators by absolute path: parsing the 2.7 MB spec takes a
// noticeable fraction of a second, and every test in a process wants it.
var (
	loadMu sync.Mutex
	loaded = map[string]*loadResult{}
)

type loadResult struct {
	once sync.Once
	v    *Validator
	err  error
}

// Load reads the spec at path and returns a Validator for its
// #/components/schemas. The file is parsed once per process; later calls with
// the same path return the same Validator.
func Load(path string) (*Validator, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("apischema: %w", err)
	}
	loadMu.Lock()
	r, ok := loaded[abs]
	if !ok {
		r = &loadResult{}
		loaded[abs] = r
	}
	loadMu.Unlock()
	// Once outside loadMu so loading different specs does not serialize.
	r.once.Do(func() { r.v, r.err = load(abs) })
	return r.v, r.err
}

// docURL is the resource URL the spec is registered under; refs like
// #/components/schemas/X resolve against it.
const docURL = "mem://openai/openapi.json"

func load(path string) (*Validator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("apischema: read spec: %w", err)
	}
	schemas, err := componentSchemas(raw)
	if err != nil {
		return nil, fmt.Errorf("apischema: %s: %w", path, err)
	}
	// Only components.schemas is kept, at its original location, so the
	// spec's own $refs resolve unchanged while paths and examples (most of
	// the document) are neither converted nor walked by the compiler.
	doc := map[string]any{"components": map[string]any{"schemas": schemas}}

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, fmt.Errorf("apischema: %s: %w", path, err)
	}
	return &Validator{path: path, compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
}

// Path is the file the Validator was loaded from.
func (v *Validator) Path() string { return v.path }

// Validate checks the JSON document doc against
// #/components/schemas/<schemaName>. It returns an error if the schema does not
// exist or does not compile, if doc is not JSON, or if doc does not conform;
// a non-conforming document yields an error wrapping a
// *jsonschema.ValidationError whose message lists every violation.
func (v *Validator) Validate(schemaName string, doc []byte) error {
	sch, err := v.schema(schemaName)
	if err != nil {
		return err
	}
	// jsonschema.UnmarshalJSON keeps numbers as json.Number, which is what
	// the validator's integer checks expect.
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("apischema: %s: document is not JSON: %w", schemaName, err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("apischema: document does not match %s: %w", schemaName, err)
	}
	return nil
}

// ErrNoSchema is returned (wrapped) when the spec has no schema of that name.
var ErrNoSchema = errors.New("no such schema")

func (v *Validator) schema(name string) (*jsonschema.Schema, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.compiled[name]; ok {
		return s, nil
	}
	// Escape as a JSON pointer token, then as a URL fragment.
	tok := strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
	s, err := v.compiler.Compile(docURL + "#/components/schemas/" + url.PathEscape(tok))
	if err != nil {
		var perr *jsonschema.JSONPointerNotFoundError
		if errors.As(err, &perr) {
			return nil, fmt.Errorf("apischema: %q: %w", name, ErrNoSchema)
		}
		return nil, fmt.Errorf("apischema: compile %s: %w", name, err)
	}
	v.compiled[name] = s
	return s, nil
}
