package fake

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long Start's server waits for in-flight requests
// once its context ends. Handlers watch their request context, which derives
// from the same context, so they normally finish at once.
const shutdownGrace = 5 * time.Second

// Start serves the fake OpenAI upstream configured by opts on addr (use
// "127.0.0.1:0" for a free port) in the background, and shuts it down when ctx
// ends. It returns once the listener is open, with the address it is bound to.
// Tests that do not need a real port can use httptest.NewServer(NewOpenAI(opts))
// instead.
func Start(ctx context.Context, addr string, opts Options) (*http.Server, net.Addr, error) {
	h := NewOpenAI(opts)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("fake: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Requests inherit ctx, so cancelling it also ends long delays and
		// streams instead of leaving Shutdown to wait them out.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("fake: serve %s: %v", ln.Addr(), err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
	}()
	return srv, ln.Addr(), nil
}
