package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

func TestSpecAvailable(t *testing.T) { schematest.RequireSpec(t) }

// conforms checks doc against the named OpenAI schema.
func conforms(t testing.TB, schema string, doc []byte) {
	t.Helper()
	schematest.Conforms(t, schema, doc)
}

// decode unmarshals JSON for comparison, failing on invalid JSON.
func decode(t testing.TB, what string, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s is not valid JSON: %v\n%s", what, err, b)
	}
	return v
}

// jsonEqual fails unless got and want are the same JSON value (key order
// and spacing aside).
func jsonEqual(t testing.TB, got []byte, want string) {
	t.Helper()
	if !reflect.DeepEqual(decode(t, "got", got), decode(t, "want", []byte(want))) {
		t.Errorf("JSON differs\n got: %s\nwant: %s", got, compact(want))
	}
}

func compact(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// wantAPIError checks that err is (or wraps) an *apierror.Error with the
// given status, code and param.
func wantAPIError(t testing.TB, err error, status int, code, param string) *apierror.Error {
	t.Helper()
	e, ok := errors.AsType[*apierror.Error](err)
	if !ok {
		t.Fatalf("err = %v (%T), want an *apierror.Error", err, err)
	}
	if e.Status != status || e.Code != code || e.Param != param {
		t.Errorf("error status %d code %q param %q, want %d %q %q (message %q)", e.Status, e.Code, e.Param, status, code, param, e.Message)
	}
	conforms(t, "ErrorResponse", e.JSON())
	return e
}

// sseData splits OpenAI SSE output into its data payloads, failing on
// anything but "data: ...\n\n" events.
func sseData(t testing.TB, out []byte) []string {
	t.Helper()
	var data []string
	for _, ev := range strings.SplitAfter(string(out), "\n\n") {
		if ev == "" {
			continue
		}
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || !strings.HasSuffix(d, "\n\n") || strings.Count(d, "\n") != 2 {
			t.Fatalf("malformed OpenAI SSE event %q in\n%s", ev, out)
		}
		data = append(data, strings.TrimSuffix(d, "\n\n"))
	}
	return data
}
