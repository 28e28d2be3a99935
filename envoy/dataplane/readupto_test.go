package dataplane

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadUpTo: the body whole when it is within the limit, limit+1 bytes
// and over when it is not, with or without a (right or wrong) declared
// length, from readers that return a byte at a time or EOF with data.
func TestReadUpTo(t *testing.T) {
	body := strings.Repeat("abcdefghij", 100) // 1000 bytes
	for _, tc := range []struct {
		name     string
		r        func() io.Reader
		limit    int64
		hint     int64
		want     string
		wantOver bool
	}{
		{"no hint", func() io.Reader { return strings.NewReader(body) }, 4096, 0, body, false},
		{"exact hint", func() io.Reader { return strings.NewReader(body) }, 4096, 1000, body, false},
		{"short hint", func() io.Reader { return strings.NewReader(body) }, 4096, 10, body, false},
		{"long hint", func() io.Reader { return strings.NewReader(body) }, 4096, 3000, body, false},
		{"at the limit", func() io.Reader { return strings.NewReader(body) }, 1000, 1000, body, false},
		{"over the limit", func() io.Reader { return strings.NewReader(body) }, 999, 0, body, true},
		{"over the limit, hint past it", func() io.Reader { return strings.NewReader(body) }, 10, 1000, body[:11], true},
		{"byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }, 4096, 1000, body, false},
		{"EOF with data", func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) }, 4096, 0, body, false},
		{"empty", func() io.Reader { return strings.NewReader("") }, 4096, 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, over, err := readUpTo(tc.r(), tc.limit, tc.hint)
			if err != nil {
				t.Fatal(err)
			}
			if over != tc.wantOver || !bytes.Equal(got, []byte(tc.want)) {
				t.Errorf("got %d bytes, over %v; want %d bytes, over %v", len(got), over, len(tc.want), tc.wantOver)
			}
		})
	}
	boom := errors.New("boom")
	if _, _, err := readUpTo(iotest.ErrReader(boom), 10, 0); !errors.Is(err, boom) {
		t.Errorf("reader error: got %v", err)
	}
}
