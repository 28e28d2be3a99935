// Package schematest owns the test-side use of the OpenAI schema: find and
// load the spec once per test binary, validate documents against it, and say
// clearly when the spec is not checked out (CI has it beside the repository).
package schematest

import (
	"os"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testing/apischema"
)

var (
	once      sync.Once
	validator *apischema.Validator
	path      string
	loadErr   error
	warned    sync.Once
)

// Validator returns the loaded spec, or nil when it is not present.
// A spec that is present but fails to load fails the test.
func Validator(t testing.TB) *apischema.Validator {
	t.Helper()
	once.Do(func() {
		var ok bool
		path, ok = apischema.Find()
		if ok {
			validator, loadErr = apischema.Load(path)
		}
	})
	if loadErr != nil {
		t.Fatalf("load OpenAI spec %s: %v", path, loadErr)
	}
	if validator == nil {
		if os.Getenv("CI") != "" {
			// CI always has the spec beside the repository: a missing spec
			// there is a broken checkout, never a reason to check less.
			t.Fatalf("OpenAI spec not found in CI (looked for %s; set %s): the contract checks cannot run", path, apischema.EnvSpec)
		}
		warned.Do(func() {
			t.Logf("OpenAI spec not found (looked for %s; set %s): bodies are not checked against the schema", path, apischema.EnvSpec)
		})
	}
	return validator
}

// Conforms fails the test if doc does not validate against the named
// component schema (e.g. "ErrorResponse"); it is a no-op without the spec.
func Conforms(t testing.TB, schema string, doc []byte) {
	t.Helper()
	if v := Validator(t); v != nil {
		if err := v.Validate(schema, doc); err != nil {
			t.Errorf("%s: %v\ndocument: %s", schema, err, doc)
		}
	}
}

// RequireSpec skips the test, saying why, when the spec is absent; use it in
// one test per package so `go test -v` shows whether contracts were checked.
func RequireSpec(t testing.TB) {
	t.Helper()
	if Validator(t) == nil {
		t.Skipf("OpenAI spec not found: looked for %s (set %s); contract checks skipped", path, apischema.EnvSpec)
	}
}
