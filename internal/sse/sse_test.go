package sse

import (
	"fmt"
	"strings"
	"testing"
)

func collect(t *testing.T, chunks []string) []string {
	t.Helper()
	var s Splitter
	var got []string
	for i, c := range chunks {
		err := s.Feed([]byte(c), i == len(chunks)-1, func(ev Event) error {
			got = append(got, fmt.Sprintf("%s|%s", ev.Name, ev.Data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func TestSplitterEveryChunking(t *testing.T) {
	stream := "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: {\"b\":2}\r\n\r\ndata: line1\ndata: line2\n\nevent: end\ndata: [DONE]"
	want := []string{"message_start|{\"a\":1}", "|{\"b\":2}", "|line1\nline2", "end|[DONE]"}
	// Every split into two chunks, and byte-at-a-time.
	for cut := 0; cut <= len(stream); cut++ {
		got := collect(t, []string{stream[:cut], stream[cut:]})
		if strings.Join(got, ";") != strings.Join(want, ";") {
			t.Fatalf("cut at %d: got %q want %q", cut, got, want)
		}
	}
	var bytewise []string
	for i := range stream {
		bytewise = append(bytewise, stream[i:i+1])
	}
	if got := collect(t, bytewise); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("byte at a time: got %q", got)
	}
}

func TestSplitterLimit(t *testing.T) {
	s := Splitter{Max: 8}
	err := s.Feed([]byte("data: 0123456789"), false, func(Event) error { return nil })
	if err != ErrEventTooLarge {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}

func TestAppend(t *testing.T) {
	got := string(AppendEvent(AppendData(nil, []byte(`{"x":1}`)), "ping", []byte(`{}`)))
	if got != "data: {\"x\":1}\n\nevent: ping\ndata: {}\n\n" {
		t.Fatalf("got %q", got)
	}
}

func BenchmarkFeed(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n")
	var s Splitter
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		_ = s.Feed(chunk, false, func(Event) error { return nil })
	}
}
