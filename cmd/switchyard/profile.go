package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"
)

// ProfileEnv names a loopback address on which the process serves CPU and
// heap profiles for benchmarks (make bench):
//
//	GET /debug/cpu?seconds=N   a CPU profile of the next N seconds (pprof format)
//	GET /debug/heap            a heap profile
//	GET /debug/trace?seconds=N an execution trace of the next N seconds
//	                           (go tool trace: scheduling latency, wake-ups)
//
// It is off unless set, and refuses non-loopback addresses: profiles reveal
// code paths and timings, not something to offer beyond the machine. The
// handlers are on their own mux (not net/http/pprof's DefaultServeMux
// registration), so nothing else ever serves them.
const ProfileEnv = "SWITCHYARD_PPROF_LISTEN"

func init() {
	addr := os.Getenv(ProfileEnv)
	if addr == "" {
		return
	}
	if err := serveProfiles(addr); err != nil {
		fmt.Fprintf(os.Stderr, "switchyard: %s: %v\n", ProfileEnv, err)
		os.Exit(1)
	}
}

func serveProfiles(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/cpu", timedProfile(300, pprof.StartCPUProfile, pprof.StopCPUProfile))
	mux.HandleFunc("GET /debug/trace", timedProfile(60, trace.Start, trace.Stop))
	mux.HandleFunc("GET /debug/heap", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/octet-stream")
		_ = pprof.Lookup("heap").WriteTo(w, 0)
	})
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}

// timedProfile serves a profile that runs for the request's ?seconds=N (1
// to maxSecs), or until the client goes away: start writes it to the
// response, stop ends it.
func timedProfile(maxSecs int, start func(io.Writer) error, stop func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.Atoi(r.URL.Query().Get("seconds"))
		if err != nil || secs < 1 || secs > maxSecs {
			http.Error(w, fmt.Sprintf("seconds: want 1-%d", maxSecs), http.StatusBadRequest)
			return
		}
		w.Header().Set("content-type", "application/octet-stream")
		if err := start(w); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		select {
		case <-time.After(time.Duration(secs) * time.Second):
		case <-r.Context().Done():
		}
		stop()
	}
}
