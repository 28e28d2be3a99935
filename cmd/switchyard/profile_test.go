package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestServeProfiles checks the benchmark profile endpoint: loopback only,
// bounded durations, and each profile in its own format.
func TestServeProfiles(t *testing.T) {
	if err := serveProfiles("0.0.0.0:0"); err == nil {
		t.Fatal("a non-loopback address was accepted")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := serveProfiles(addr); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path   string
		status int
		prefix []byte // the format's magic, for a 200
	}{
		{"/debug/cpu?seconds=0", http.StatusBadRequest, nil},
		{"/debug/cpu?seconds=x", http.StatusBadRequest, nil},
		{"/debug/trace?seconds=61", http.StatusBadRequest, nil},
		{"/debug/trace?seconds=1", http.StatusOK, []byte("go 1.")},
		{"/debug/cpu?seconds=1", http.StatusOK, []byte{0x1f, 0x8b}}, // gzipped pprof
		{"/debug/heap", http.StatusOK, []byte{0x1f, 0x8b}},
	} {
		resp, err := http.Get("http://" + addr + tc.path)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, resp.StatusCode, tc.status)
			continue
		}
		if tc.prefix != nil && !bytes.HasPrefix(body, tc.prefix) {
			t.Errorf("%s: body starts %q, want %q", tc.path, body[:min(len(body), 8)], tc.prefix)
		}
	}
}
