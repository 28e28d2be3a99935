// Package adsclient owns the client side of an xDS ADS stream, state of the
// world: subscriptions, ACKs and NACKs, and reconnection. The data plane uses
// it to receive listeners, routes, clusters, endpoints and secrets; extproc
// uses it to receive the catalog over RTDS.
//
// One Client drives one ADS stream at a time. Every response carries the
// complete set of resources of its type (state of the world), and the Client
// hands that set to the type's Handler before it answers: an ACK when the
// handler returns nil, a NACK carrying the error when it does not.
package adsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	// Responses are unpacked with anypb.UnmarshalNew, which finds message
	// types in the global registry: every resource type served, and every
	// typed config nested in one that consumers unpack, must be linked.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
)

// Handler receives the complete current set of resources of one type, keyed
// by resource name (state of the world). Returning an error NACKs the update
// (error_detail set, version not advanced).
//
// A handler may be called again with a version it has already seen: after a
// reconnect, after a subscription change, or when the server resends a
// NACKed version. It must treat every call as the full desired state.
// Handlers run one at a time on Run's goroutine; a handler may call Watch.
type Handler = func(ctx context.Context, version string, resources map[string]proto.Message) error

// Backoff bounds. Reconnects and repeated NACKs of the same version both back
// off exponentially between these, with jitter on reconnects.
const (
	defaultMinBackoff = 250 * time.Millisecond
	defaultMaxBackoff = 30 * time.Second

	defaultMinNackBackoff = 500 * time.Millisecond
	defaultMaxNackBackoff = 10 * time.Second
)

// Client is an ADS client. Create it with New, add subscriptions with Watch,
// and drive it with Run.
type Client struct {
	cc     grpc.ClientConnInterface
	node   *corev3.Node
	logger *slog.Logger

	// Tunable in tests.
	minBackoff, maxBackoff         time.Duration
	minNackBackoff, maxNackBackoff time.Duration
	// now is the NACK backoff's clock (time.Now); deferred, when set, is
	// told each time the sender holds requests back, and for how long:
	// tests move the clock and wait for the sender's decisions instead of
	// counting requests in a wall-clock window.
	now      func() time.Time
	deferred func(wait time.Duration)

	running atomic.Bool
	// kick wakes the sender of the live stream; it holds at most one signal,
	// which is enough because the sender rescans every subscription.
	kick chan struct{}

	mu     sync.Mutex
	subs   map[string]*subscription
	order  []string // type URLs in first-Watch order, so requests go out deterministically
	synced chan struct{}
	isSync bool
}

// subscription is the state of one resource type. Fields marked "stream"
// belong to the current ADS stream and are reset when a new one opens.
type subscription struct {
	typeURL string
	names   []string // sorted, deduplicated; nil means wildcard
	handler Handler

	version     string           // stream: version of the last ACKed response
	nonce       string           // stream: nonce of the last response handled
	errorDetail *statuspb.Status // stream: why the response with nonce was NACKed; nil after an ACK
	pending     bool             // stream: a request must be sent
	handling    bool             // stream: a response is with the handler; its ACK/NACK will carry any change
	notBefore   time.Time        // stream: do not send before (NACK backoff)

	acked       bool                     // an ACK has been sent at least once
	nackVersion string                   // version last NACKed
	nacks       int                      // consecutive NACKs of nackVersion
	accepted    map[string]proto.Message // last accepted resources, for TTL heartbeats
}

// New returns a Client that opens its ADS stream on cc and identifies itself
// as node. A nil logger discards logs.
func New(cc grpc.ClientConnInterface, node *corev3.Node, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		cc:             cc,
		node:           proto.Clone(node).(*corev3.Node),
		logger:         logger,
		minBackoff:     defaultMinBackoff,
		maxBackoff:     defaultMaxBackoff,
		minNackBackoff: defaultMinNackBackoff,
		maxNackBackoff: defaultMaxNackBackoff,
		now:            time.Now,
		kick:           make(chan struct{}, 1),
		subs:           map[string]*subscription{},
		synced:         make(chan struct{}),
	}
}

// Watch subscribes to typeURL (resourcev3.ListenerType etc.). names == nil
// means wildcard (LDS, CDS). An empty non-nil names is sent the same way: in
// state of the world an empty resource_names list is the legacy wildcard,
// which go-control-plane answers with every resource of the type.
//
// Calling Watch again for the same type replaces the names (a new
// DiscoveryRequest goes out on the live stream if they changed); a nil h keeps
// the previous handler, and a type first watched with a nil h accepts every
// update. Watch is safe to call from inside a Handler and before or after Run
// starts; it never blocks on the network.
func (c *Client) Watch(typeURL string, names []string, h Handler) {
	if len(names) > 0 {
		names = slices.Compact(slices.Sorted(slices.Values(names)))
	} else {
		names = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.subs[typeURL]
	if !ok {
		s = &subscription{typeURL: typeURL, names: names, handler: h, pending: true}
		c.subs[typeURL] = s
		c.order = append(c.order, typeURL)
		c.signal()
		return
	}
	if h != nil {
		s.handler = h
	}
	if slices.Equal(s.names, names) {
		return
	}
	s.names = names
	s.pending = true
	s.notBefore = time.Time{} // a new subscription is news, not a retry
	c.signal()
}

// Synced returns a channel closed once every watched type has received and
// ACKed at least one response. It closes once: types watched after that do
// not reopen it. It stays open while nothing is watched.
func (c *Client) Synced() <-chan struct{} { return c.synced }

// signal wakes the sender without blocking.
func (c *Client) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run opens the ADS stream, sends every subscription, dispatches responses to
// handlers (sequentially, on Run's goroutine), ACKs or NACKs them
// (version_info + response_nonce), and reconnects with capped exponential
// backoff until ctx ends. It returns ctx's error, or an error at once if Run
// is already running.
//
// A new stream starts from an empty version_info for every type, so the
// server answers each type again even when its version counter restarted
// along with it; handlers then see the full state once more.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("adsclient: Run is already running")
	}
	defer c.running.Store(false)

	backoff := c.minBackoff
	for {
		received, err := c.runStream(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if received {
			// The stream worked; this is a new failure, not a continuing one.
			backoff = c.minBackoff
		}
		// Jitter over the upper half of the backoff keeps a fleet of clients from
		// reconnecting in lockstep after a control plane restart.
		wait := backoff/2 + rand.N(backoff/2+1)
		c.logger.Warn("adsclient: stream ended, reconnecting", "error", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, c.maxBackoff)
	}
}

// runStream runs one ADS stream until it fails or ctx ends. It reports
// whether any response arrived.
func (c *Client) runStream(ctx context.Context) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady lets the ClientConn's own reconnection (with its own
	// backoff) finish instead of failing the stream at once while the
	// connection is down.
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.cc).
		StreamAggregatedResources(sctx, grpc.WaitForReady(true))
	if err != nil {
		return false, fmt.Errorf("adsclient: open stream: %w", err)
	}
	c.resetStream()

	sendErr := make(chan error, 1)
	go func() {
		err := c.sendLoop(sctx, stream)
		if err != nil {
			cancel() // unblocks Recv below
		}
		sendErr <- err
	}()

	received := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			cancel()
			if serr := <-sendErr; serr != nil && ctx.Err() == nil {
				return received, serr
			}
			return received, fmt.Errorf("adsclient: receive: %w", err)
		}
		received = true
		c.handle(ctx, resp)
	}
}

// resetStream prepares every subscription for a new stream: nonces are per
// stream, and the version is cleared so the server sends everything again.
func (c *Client) resetStream() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		s.version = ""
		s.nonce = ""
		s.errorDetail = nil
		s.pending = true
		s.handling = false
		s.notBefore = time.Time{}
	}
	c.signal()
}

// sendLoop sends the requests of pending subscriptions until ctx ends or a
// send fails. It is the only goroutine that sends on the stream, as gRPC
// requires, and it sends outside the lock, so Watch never waits for the
// network.
func (c *Client) sendLoop(ctx context.Context, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient) error {
	first := true
	for {
		reqs, wait := c.takePending(first)
		for _, req := range reqs {
			if err := stream.Send(req); err != nil {
				return fmt.Errorf("adsclient: send %s: %w", req.GetTypeUrl(), err)
			}
			first = false
		}
		var (
			t     *time.Timer
			timer <-chan time.Time
		)
		if wait > 0 {
			if c.deferred != nil {
				c.deferred(wait)
			}
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-c.kick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// takePending builds the requests for every subscription that needs one now
// and clears their pending flags; wait is how long until a deferred one
// (NACK backoff) is due, or 0. The node goes on the stream's first request
// only, which is all the protocol requires.
func (c *Client) takePending(first bool) (reqs []*discoveryv3.DiscoveryRequest, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, typeURL := range c.order {
		s := c.subs[typeURL]
		if !s.pending || s.handling {
			continue
		}
		if d := s.notBefore.Sub(now); d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		s.pending = false
		req := &discoveryv3.DiscoveryRequest{
			TypeUrl:       s.typeURL,
			VersionInfo:   s.version,
			ResponseNonce: s.nonce,
			ResourceNames: slices.Clone(s.names),
			ErrorDetail:   s.errorDetail,
		}
		if first && len(reqs) == 0 {
			req.Node = c.node
		}
		reqs = append(reqs, req)
	}
	return reqs, wait
}

// handle gives one response to its handler and queues the ACK or NACK.
func (c *Client) handle(ctx context.Context, resp *discoveryv3.DiscoveryResponse) {
	c.mu.Lock()
	s, ok := c.subs[resp.GetTypeUrl()]
	if !ok {
		c.mu.Unlock()
		c.logger.Warn("adsclient: response for a type never watched", "type", resp.GetTypeUrl())
		return
	}
	s.handling = true
	h, prev := s.handler, s.accepted
	c.mu.Unlock()

	resources, err := decode(resp, prev)
	if err == nil && h != nil {
		err = h(ctx, resp.GetVersionInfo(), maps.Clone(resources))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	s.handling = false
	s.pending = true
	s.nonce = resp.GetNonce()
	if err == nil {
		s.version = resp.GetVersionInfo()
		s.errorDetail = nil
		s.notBefore = time.Time{}
		s.nacks, s.nackVersion = 0, ""
		s.accepted = resources
		s.acked = true
		c.checkSynced()
	} else {
		c.logger.Warn("adsclient: rejecting update", "type", s.typeURL, "version", resp.GetVersionInfo(), "error", err)
		s.errorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		if s.nackVersion == resp.GetVersionInfo() {
			s.nacks++
		} else {
			s.nackVersion, s.nacks = resp.GetVersionInfo(), 1
		}
		// A state-of-the-world server answers a NACK by sending the same
		// version again (go-control-plane does so at once). The first NACK of
		// a version goes out immediately; repeats back off so a bad snapshot
		// does not become a busy loop. A new version is answered at once.
		if s.nacks > 1 {
			d := c.minNackBackoff << min(s.nacks-2, 16)
			s.notBefore = c.now().Add(min(d, c.maxNackBackoff))
		}
	}
	c.signal()
}

// checkSynced closes synced once every subscription has ACKed. Called with mu held.
func (c *Client) checkSynced() {
	if c.isSync || len(c.subs) == 0 {
		return
	}
	for _, s := range c.subs {
		if !s.acked {
			return
		}
	}
	c.isSync = true
	close(c.synced)
}

// decode unpacks a response into resources keyed by name. prev supplies the
// resources a TTL heartbeat (a Resource wrapper without a resource) refers to.
func decode(resp *discoveryv3.DiscoveryResponse, prev map[string]proto.Message) (map[string]proto.Message, error) {
	out := make(map[string]proto.Message, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("resource %d: unpack %s: %w", i, a.GetTypeUrl(), err)
		}
		var name string
		if w, ok := m.(*discoveryv3.Resource); ok {
			// go-control-plane wraps resources that have a TTL.
			name = w.GetName()
			if w.GetResource() == nil {
				p, ok := prev[name]
				if !ok {
					return nil, fmt.Errorf("resource %d: heartbeat for unknown resource %q", i, name)
				}
				out[name] = p
				continue
			}
			a = w.GetResource()
			if m, err = a.UnmarshalNew(); err != nil {
				return nil, fmt.Errorf("resource %q: unpack %s: %w", name, a.GetTypeUrl(), err)
			}
		}
		if a.GetTypeUrl() != resp.GetTypeUrl() {
			return nil, fmt.Errorf("resource %d has type %s in a %s response", i, a.GetTypeUrl(), resp.GetTypeUrl())
		}
		if n := cachev3.GetResourceName(m); n != "" {
			name = n
		}
		if name == "" {
			return nil, fmt.Errorf("resource %d (%s) has no name", i, a.GetTypeUrl())
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("duplicate resource %q", name)
		}
		out[name] = m
	}
	return out, nil
}
