package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

// The clock is fixed for the whole test binary so that golden outputs are
// exact; nothing here depends on the real time.
func init() { now = func() time.Time { return time.Unix(1700000000, 0) } }

func TestSpecAvailable(t *testing.T) { schematest.RequireSpec(t) }

// conforms checks doc against the named OpenAI schema.
func conforms(t testing.TB, schema string, doc []byte) {
	t.Helper()
	schematest.Conforms(t, schema, doc)
}

// jsonEqual fails the test unless got and want are the same JSON value
// (member order and whitespace aside).
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v\n%s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", compact(got), compact([]byte(want)))
	}
}

func compact(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// asAPIError fails the test unless err is an *apierror.Error.
func asAPIError(t *testing.T, err error) *apierror.Error {
	t.Helper()
	var e *apierror.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *apierror.Error", err, err)
	}
	return e
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// decodeBase64Floats decodes an OpenAI base64 embedding.
func decodeBase64Floats(t *testing.T, s string) []float32 {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw)%4 != 0 {
		t.Fatalf("base64 embedding: %v (%d bytes)", err, len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}
