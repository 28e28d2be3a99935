package controlplane

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// ackTracker follows, per xDS stream, the version of each resource type
// the client last accepted, from the requests it sends (state of the world:
// a request without error_detail acknowledges version_info). A change can
// then wait until every subscriber of a type runs the new version.
type ackTracker struct {
	mu      sync.Mutex
	streams map[int64]*streamAcks
	changed chan struct{} // closed and replaced on every update
}

type streamAcks struct {
	node  string
	acked map[string]string // type URL -> version; "" until the first ACK
}

func newAckTracker() *ackTracker {
	return &ackTracker{streams: map[int64]*streamAcks{}, changed: make(chan struct{})}
}

func (a *ackTracker) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *ackTracker) request(id int64, req *discoveryv3.DiscoveryRequest) {
	if req.GetTypeUrl() == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.streams[id]
	if st == nil {
		st = &streamAcks{acked: map[string]string{}}
		a.streams[id] = st
	}
	if n := req.GetNode().GetId(); n != "" {
		st.node = n
	}
	v, seen := st.acked[req.GetTypeUrl()]
	switch {
	case req.GetErrorDetail() == nil:
		v = req.GetVersionInfo()
	case !seen:
		v = ""
	}
	st.acked[req.GetTypeUrl()] = v
	a.notifyLocked()
}

func (a *ackTracker) closed(id int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.streams, id)
	a.notifyLocked()
}

// lagging lists the streams subscribed to one of types that have not
// accepted version of it.
func (a *ackTracker) laggingLocked(types []string, version string) []string {
	var out []string
	for id, st := range a.streams {
		for _, typ := range types {
			if v, ok := st.acked[typ]; ok && v != version {
				out = append(out, fmt.Sprintf("stream %d (node %q) at %s version %q", id, st.node, typ, v))
			}
		}
	}
	sort.Strings(out)
	return out
}

// wait blocks until every stream subscribed to one of types has accepted
// version of it, or timeout passes (it then returns the streams still
// behind), or ctx ends.
func (a *ackTracker) wait(ctx context.Context, types []string, version string, timeout time.Duration) []string {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		a.mu.Lock()
		lag := a.laggingLocked(types, version)
		ch := a.changed
		a.mu.Unlock()
		if len(lag) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-t.C:
			return lag
		case <-ctx.Done():
			return lag
		}
	}
}
