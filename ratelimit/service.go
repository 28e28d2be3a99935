package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/limiter"
	"github.com/envoyproxy/ratelimit/src/provider"
	rlservice "github.com/envoyproxy/ratelimit/src/service"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Options configure a Server.
type Options struct {
	// Cache is the counter store; nil means a new MemoryCache on Clock.
	Cache limiter.RateLimitCache
	// Clock is the time source for the default cache and the service;
	// nil means SystemClock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is envoyproxy/ratelimit's RLS service (service.NewService), the
// very logic its own binary runs, embedded so it can be registered on a
// grpc.Server of ours. Calls are answered by decide, which makes the
// service's decision without the cost of its entry point's tracing. Its
// runner is not used: it calls os.Exit on signals and exits fatally on a
// port clash, neither acceptable inside the gateway.
//
// Configuration comes from SetConfig, usually through ConfigHandler, the xDS
// handler for resourcev3.RateLimitConfigType, so the embedded service and a
// fleet's ratelimit service (CONFIG_TYPE=GRPC_XDS_SOTW) read the same
// resources from the same control plane. Until the first configuration
// arrives every call fails, and callers apply their failure mode.
type Server struct {
	svc    rlservice.RateLimitServiceServer
	cache  limiter.RateLimitCache
	sm     stats.Manager
	log    *slog.Logger
	events chan provider.ConfigUpdateEvent
	loaded atomic.Bool
	mu     sync.Mutex // serialises SetConfig
	// direct: answer through decide rather than the service's entry point
	// (false when the library's settings ask for what decide omits).
	direct bool
	// limits caches the configuration's limit per descriptor for decide.
	limits limitCache
}

// NewServer returns a Server with no configuration.
func NewServer(opts Options) *Server {
	quietLibraryLogs()
	clock := opts.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	sm := newStatsManager()
	cache := opts.Cache
	if cache == nil {
		cache = newMemoryCache(clock)
	}
	s := &Server{sm: sm, cache: cache, log: opts.Logger, events: make(chan provider.ConfigUpdateEvent)}
	if s.log == nil {
		s.log = slog.Default()
	}
	// forceStart: do not block for a first configuration. Configuration is
	// then set synchronously through svc.SetConfig rather than the event
	// channel, so a caller of SetConfig knows it is in effect when it
	// returns. The service's own goroutine waits on the channel, which is
	// never sent to and never closed (a closed channel would hand it a nil
	// event): one idle goroutine per Server.
	s.svc = rlservice.NewService(cache, s, sm, nil, clock, false, true, false)
	lib := settings.NewSettings()
	s.direct = !lib.RateLimitResponseHeadersEnabled && !lib.ResponseDynamicMetadata
	return s
}

// ConfigUpdateEvent and Stop make Server the service's
// provider.RateLimitConfigProvider.
func (s *Server) ConfigUpdateEvent() <-chan provider.ConfigUpdateEvent { return s.events }

// Stop implements provider.RateLimitConfigProvider.
func (s *Server) Stop() {}

// configEvent is a provider.ConfigUpdateEvent carrying a loaded configuration.
type configEvent struct{ cfg config.RateLimitConfig }

func (e configEvent) GetConfig() (config.RateLimitConfig, any) { return e.cfg, nil }

// SetConfig replaces the service's configuration with the given resources.
// An invalid configuration is rejected and the previous one stays.
func (s *Server) SetConfig(resources ...*rlsconfv3.RateLimitConfig) error {
	cfg, err := loadConfigs(resources, s.sm)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.svc.SetConfig(configEvent{cfg}, false)
	s.loaded.Store(true)
	return nil
}

// Ready reports whether a configuration has been loaded.
func (s *Server) Ready() bool { return s.loaded.Load() }

// ConfigHandler is the xDS handler for resourcev3.RateLimitConfigType: it
// loads every RateLimitConfig resource of the update. An error NACKs it.
func (s *Server) ConfigHandler(_ context.Context, version string, resources map[string]proto.Message) error {
	list := make([]*rlsconfv3.RateLimitConfig, 0, len(resources))
	for name, r := range resources {
		c, ok := r.(*rlsconfv3.RateLimitConfig)
		if !ok {
			return fmt.Errorf("ratelimit: xDS resource %q is a %T, not a RateLimitConfig", name, r)
		}
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b *rlsconfv3.RateLimitConfig) int {
		switch {
		case a.GetName() < b.GetName():
			return -1
		case a.GetName() > b.GetName():
			return 1
		}
		return 0
	})
	if err := s.SetConfig(list...); err != nil {
		return fmt.Errorf("ratelimit: xDS version %q: %w", version, err)
	}
	s.log.Info("ratelimit: configuration loaded", "version", version, "resources", len(list))
	return nil
}

// InMemory reports whether the counter store is this process's memory
// (MemoryCache): a call then waits on nothing but a lock, so a caller
// need not bound it with a timeout.
func (s *Server) InMemory() bool {
	_, ok := s.cache.(*MemoryCache)
	return ok
}

// ShouldRateLimit implements the RLS API. The service turns counter-store
// and configuration errors into gRPC errors itself but lets any other panic
// through, which would take the whole process down with it; here it ends
// the one call instead.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ratelimit: panic in ShouldRateLimit", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, status.Error(codes.Internal, "ratelimit: internal error")
		}
	}()
	if s.direct {
		resp, err = s.decide(ctx, req)
	} else {
		resp, err = s.svc.ShouldRateLimit(ctx, req)
	}
	if err != nil {
		var se interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &se) {
			// "no rate limit configuration loaded" and the like.
			err = status.Error(codes.Unavailable, err.Error())
		}
	}
	return resp, err
}

// Register registers the server as envoy.service.ratelimit.v3.RateLimitService on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

var quietOnce sync.Once

// quietLibraryLogs lowers envoyproxy/ratelimit's logger (logrus, global) to
// warnings: at info it logs every configuration load and connection.
func quietLibraryLogs() {
	quietOnce.Do(func() { logrus.SetLevel(logrus.WarnLevel) })
}
