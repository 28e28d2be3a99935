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

// Kinds of fake, named as config provider kinds.
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindGemini    = "gemini"
	// KindBrave is the Brave Search API, behind the web_search tool.
	KindBrave = "brave"
)

// Handler returns the fake of the given kind (KindOpenAI, KindAnthropic,
// KindGemini or KindBrave) configured by opts.
func Handler(kind string, opts Options) (http.Handler, error) {
	switch kind {
	case KindOpenAI:
		return NewOpenAI(opts), nil
	case KindAnthropic:
		return NewAnthropic(opts), nil
	case KindGemini:
		return NewGemini(opts), nil
	case KindBrave:
		return NewBraveSearch(opts), nil
	}
	return nil, fmt.Errorf("fake: unknown kind %q (want %s, %s, %s or %s)", kind, KindOpenAI, KindAnthropic, KindGemini, KindBrave)
}

// Start serves the fake upstream of the given kind (see Handler) configured
// by opts on addr (use "127.0.0.1:0" for a free port) in the background, and
// shuts it down when ctx ends. It returns once the listener is open, with the
// address it is bound to. Tests that do not need a real port can use
// httptest.NewServer with Handler's result (or NewOpenAI and friends)
// instead.
func Start(ctx context.Context, addr, kind string, opts Options) (*http.Server, net.Addr, error) {
	h, err := Handler(kind, opts)
	if err != nil {
		return nil, nil, err
	}
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
