package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/switchyard-ai/switchyard/config"
)

// nodeKey is the one snapshot cache key every node maps to.
const nodeKey = "switchyard"

// allNodes maps every node to nodeKey: all Envoys, data planes and extprocs
// receive the same configuration, so one SetSnapshot serves everyone,
// including nodes that connect later under ids nobody announced.
type allNodes struct{}

func (allNodes) ID(*corev3.Node) string { return nodeKey }

// Server serves the snapshot of the latest configuration over ADS and the
// per-type discovery services.
type Server struct {
	logger *slog.Logger
	cache  cachev3.SnapshotCache
	xds    serverv3.Server

	mu      sync.Mutex // serialises Update so versions reach the cache in order
	version uint64
}

// New returns a Server with no snapshot: subscribers wait until the first
// Update. A nil logger discards logs.
func New(logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// ADS mode makes the cache hold back EDS and RDS answers until the
	// request names every resource of the snapshot, which keeps Envoy's view
	// consistent while it moves from one snapshot to the next.
	cache := cachev3.NewSnapshotCache(true, allNodes{}, slogAdapter{logger})
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typeURL string) error {
			logger.Debug("xds stream opened", "stream", id, "type", typeURL)
			return nil
		},
		StreamClosedFunc: func(id int64, node *corev3.Node) {
			logger.Debug("xds stream closed", "stream", id, "node", node.GetId())
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			// A NACK means a consumer is running on older configuration than
			// we think; it is the one signal that a snapshot is unusable.
			if d := req.GetErrorDetail(); d != nil {
				logger.Warn("xds NACK", "stream", id, "node", req.GetNode().GetId(), "type", req.GetTypeUrl(),
					"version", req.GetVersionInfo(), "nonce", req.GetResponseNonce(), "error", d.GetMessage())
			}
			return nil
		},
	}
	return &Server{
		logger: logger,
		cache:  cache,
		// The server context only ends streams; grpc.Server.Stop does that too,
		// so a background context keeps the API free of lifecycle plumbing.
		xds: serverv3.NewServer(context.Background(), cache, cb),
	}
}

// Update builds a snapshot from cfg under the next version ("1", "2", ...)
// and sets it for every node. It returns the version. When Build fails the
// current snapshot stays in place and the version is not used up.
func (s *Server) Update(ctx context.Context, cfg *config.Config) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	version := strconv.FormatUint(s.version+1, 10)
	snap, err := Build(cfg, version)
	if err != nil {
		return "", err
	}
	if err := s.cache.SetSnapshot(ctx, nodeKey, snap); err != nil {
		return "", fmt.Errorf("controlplane: set snapshot %s: %w", version, err)
	}
	s.version++
	s.logger.Info("xds snapshot updated", "version", version)
	return version, nil
}

// Register registers ADS and the per-type LDS, RDS, CDS, EDS, SDS and RTDS
// services on g. Envoy uses ADS; the per-type services serve clients that
// subscribe to one type on its own stream.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.xds)
	secretservice.RegisterSecretDiscoveryServiceServer(g, s.xds)
	runtimeservice.RegisterRuntimeDiscoveryServiceServer(g, s.xds)
}

// Cache returns the snapshot cache, for inspection (GetSnapshot, status).
func (s *Server) Cache() cachev3.SnapshotCache { return s.cache }

// slogAdapter routes go-control-plane's logs to slog. Its info messages are
// per-request chatter (stale nonces), so they go to debug; its warnings
// include ADS holding back an answer during a routine snapshot change, so
// they go to info.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Debugf(format string, args ...any) { a.l.Debug(fmt.Sprintf(format, args...)) }
func (a slogAdapter) Infof(format string, args ...any)  { a.l.Debug(fmt.Sprintf(format, args...)) }
func (a slogAdapter) Warnf(format string, args ...any)  { a.l.Info(fmt.Sprintf(format, args...)) }
func (a slogAdapter) Errorf(format string, args ...any) { a.l.Error(fmt.Sprintf(format, args...)) }
