package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// drainTimeout bounds the graceful shutdown of a removed or moved listener
// before its remaining connections are closed.
const drainTimeout = 5 * time.Second

// listenerRuntime is a bound socket and the HTTP server accepting on it.
type listenerRuntime struct {
	name string
	key  string
	ln   net.Listener
	// tls is swapped in place on updates: a new certificate applies to new
	// connections without rebinding the socket.
	tls  atomic.Pointer[tls.Config]
	srv  *http.Server
	done chan struct{}
}

func listen(lc *listenerConfig) (*listenerRuntime, error) {
	if lc.network == "unix" {
		// A stale socket file from an earlier run would make bind fail.
		if fi, err := os.Stat(lc.address); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(lc.address)
		}
	}
	ln, err := net.Listen(lc.network, lc.address)
	if err != nil {
		return nil, err
	}
	return &listenerRuntime{name: lc.name, key: lc.bindKey(), ln: ln, done: make(chan struct{})}, nil
}

// setTLS installs the listener's TLS configuration (nil: clear text). When
// TLS is switched on or off, idle connections of the old kind are closed.
func (l *listenerRuntime) setTLS(cfg *tls.Config) {
	old := l.tls.Swap(cfg)
	if l.srv != nil && (old == nil) != (cfg == nil) {
		l.srv.SetKeepAlivesEnabled(false)
		l.srv.SetKeepAlivesEnabled(true)
	}
}

// serve starts the HTTP server: HTTP/1.1 and HTTP/2 with prior knowledge
// (h2c) in clear text, HTTP/1.1 and h2 by ALPN over TLS.
func (l *listenerRuntime) serve(d *DataPlane, lc *listenerConfig) {
	protocols := new(http.Protocols)
	hcm := lc.hcm
	switch hcm.codec {
	case hcmv3.HttpConnectionManager_HTTP1:
		protocols.SetHTTP1(true)
	case hcmv3.HttpConnectionManager_HTTP2:
		protocols.SetHTTP2(true)
		protocols.SetUnencryptedHTTP2(true)
	default:
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		protocols.SetUnencryptedHTTP2(true)
	}
	name := l.name
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.serveHTTP(name, w, r) }),
		Protocols:         protocols,
		ReadHeaderTimeout: hcm.headersTimeout,
		IdleTimeout:       hcm.connIdleTimeout,
		MaxHeaderBytes:    hcm.maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
		ConnContext:       framingConnContext,
		ConnState:         framingConnState,
	}
	srv := l.srv
	sl := &switchListener{Listener: l.ln, tls: &l.tls, d: d, name: name, maxHeaderBytes: hcm.maxHeaderBytes}
	go func() {
		defer close(l.done)
		err := srv.Serve(sl)
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("listener stopped", "listener", name, "error", err)
		}
	}()
	d.log.Info("listening", "listener", name, "address", l.ln.Addr().String(), "tls", l.tls.Load() != nil)
}

// shutdown drains the server for up to grace, then closes what is left.
func (l *listenerRuntime) shutdown(grace time.Duration) {
	if l.srv == nil {
		_ = l.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := l.srv.Shutdown(ctx); err != nil {
		_ = l.srv.Close()
	}
	<-l.done
}

// cutGrace is how long requests ended at the close of a drain get to write
// their last words (an error event, a 503) before the connections close.
const cutGrace = 2 * time.Second

// drain stops accepting and waits for the requests in flight until ctx
// ends; then it calls stop, which ends them, and gives them cutGrace to
// finish writing. It reports whether every request finished on its own.
func (l *listenerRuntime) drain(ctx context.Context, stop context.CancelFunc) bool {
	if l.srv == nil {
		_ = l.ln.Close()
		return true
	}
	if l.srv.Shutdown(ctx) == nil {
		<-l.done
		return true
	}
	stop()
	cctx, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	if err := l.srv.Shutdown(cctx); err != nil {
		_ = l.srv.Close()
	}
	<-l.done
	return false
}

// switchListener wraps accepted connections in TLS when the listener's
// current configuration asks for it. http.Server negotiates h2 or HTTP/1.1
// on a *tls.Conn by ALPN.
type switchListener struct {
	net.Listener
	tls            *atomic.Pointer[tls.Config]
	d              *DataPlane
	name           string
	maxHeaderBytes int
}

func (l *switchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if cfg := l.tls.Load(); cfg != nil {
		return tls.Server(c, cfg), nil
	}
	// Clear text: net/http reads through the framing checks (framing.go).
	return newFramingConn(c, l.d, l.name, l.d.framingToken, l.maxHeaderBytes), nil
}
