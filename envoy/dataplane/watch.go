package dataplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// Watcher is the subscription side of an ADS client (adsclient.Client).
// Calling Watch again for a type replaces that type's names and handler.
type Watcher interface {
	Watch(typeURL string, names []string, h func(ctx context.Context, version string, resources map[string]proto.Message) error)
}

// Watch subscribes to LDS and CDS (wildcard) and, by the names those
// resources reference, to RDS, EDS and SDS. Whenever the resources it holds
// form a complete, consistent configuration it applies them; a handler
// returns Apply's error, so an invalid update is NACKed and the previous
// resources of that type are kept. An update that references resources not
// received yet is ACKed and waits for them, as Envoy warms listeners and
// clusters.
func (d *DataPlane) Watch(w Watcher) {
	ws := &watchState{d: d, w: w, state: map[string]map[string]proto.Message{}, subscribed: map[string][]string{}}
	w.Watch(resourcev3.ListenerType, nil, ws.handler(resourcev3.ListenerType))
	w.Watch(resourcev3.ClusterType, nil, ws.handler(resourcev3.ClusterType))
}

type watchState struct {
	d          *DataPlane
	w          Watcher
	mu         sync.Mutex
	state      map[string]map[string]proto.Message // type URL -> name -> resource
	subscribed map[string][]string                 // derived type URL -> names
}

func (ws *watchState) handler(typeURL string) func(context.Context, string, map[string]proto.Message) error {
	return func(ctx context.Context, version string, resources map[string]proto.Message) error {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		for name, m := range resources {
			if err := checkType(typeURL, m); err != nil {
				return fmt.Errorf("dataplane: %s %q: %w", typeURL, name, err)
			}
		}
		prev, had := ws.state[typeURL]
		ws.state[typeURL] = resources
		err := ws.sync(ctx)
		if err != nil {
			if had {
				ws.state[typeURL] = prev
			} else {
				delete(ws.state, typeURL)
			}
			// The names to watch follow the resources actually kept.
			if rerr := ws.resubscribe(); rerr != nil {
				ws.d.log.Warn("xDS resubscription failed", "error", rerr)
			}
			ws.d.log.Warn("xDS update rejected", "type", typeURL, "version", version, "error", err)
			return err
		}
		return nil
	}
}

func checkType(typeURL string, m proto.Message) error {
	ok := false
	switch typeURL {
	case resourcev3.ListenerType:
		_, ok = m.(*listenerv3.Listener)
	case resourcev3.RouteType:
		_, ok = m.(*routev3.RouteConfiguration)
	case resourcev3.ClusterType:
		_, ok = m.(*clusterv3.Cluster)
	case resourcev3.EndpointType:
		_, ok = m.(*endpointv3.ClusterLoadAssignment)
	case resourcev3.SecretType:
		_, ok = m.(*tlsv3.Secret)
	}
	if !ok {
		return fmt.Errorf("unexpected resource type %T", m)
	}
	return nil
}

// sync resubscribes to the names the current resources reference and
// applies them once nothing they reference is missing.
func (ws *watchState) sync(ctx context.Context) error {
	if err := ws.resubscribe(); err != nil {
		return err
	}
	if _, ok := ws.state[resourcev3.ListenerType]; !ok {
		return nil // nothing to serve before the first LDS response
	}
	if _, ok := ws.state[resourcev3.ClusterType]; !ok {
		return nil
	}
	res := Resources{
		Listeners: typed[*listenerv3.Listener](ws.state[resourcev3.ListenerType], nil),
		Clusters:  typed[*clusterv3.Cluster](ws.state[resourcev3.ClusterType], nil),
		Routes:    typed[*routev3.RouteConfiguration](ws.state[resourcev3.RouteType], ws.subscribed[resourcev3.RouteType]),
		Endpoints: typed[*endpointv3.ClusterLoadAssignment](ws.state[resourcev3.EndpointType], ws.subscribed[resourcev3.EndpointType]),
		Secrets:   typed[*tlsv3.Secret](ws.state[resourcev3.SecretType], ws.subscribed[resourcev3.SecretType]),
	}
	err := ws.d.Apply(ctx, res)
	if missing := warming(err); len(missing) > 0 {
		ws.d.log.Info("xDS update incomplete; waiting for referenced resources", "missing", missing)
		return nil
	}
	return err
}

// warming returns the missing references of an Apply error when those are
// its only causes and each can still arrive over xDS.
func warming(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	var walk func(error) bool
	walk = func(e error) bool {
		var me *missingError
		if errors.As(e, &me) && e == error(me) {
			if me.static {
				return false
			}
			out = append(out, me.kind+" "+me.name)
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				if !walk(c) {
					return false
				}
			}
			return true
		case interface{ Unwrap() error }:
			return walk(u.Unwrap())
		}
		return false
	}
	if !walk(err) {
		return nil
	}
	return out
}

// resubscribe watches RDS, EDS and SDS for exactly the names the listeners
// and clusters reference.
func (ws *watchState) resubscribe() error {
	var routes, endpoints, secrets []string
	for name, m := range ws.state[resourcev3.ListenerType] {
		rds, sds, err := listenerRefs(m.(*listenerv3.Listener))
		if err != nil {
			return fmt.Errorf("listener %q: %w", name, err)
		}
		if rds != "" {
			routes = append(routes, rds)
		}
		secrets = append(secrets, sds...)
	}
	for name, m := range ws.state[resourcev3.ClusterType] {
		eds, sds, err := clusterRefs(m.(*clusterv3.Cluster))
		if err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
		if eds != "" {
			endpoints = append(endpoints, eds)
		}
		secrets = append(secrets, sds...)
	}
	ws.subscribe(resourcev3.RouteType, routes)
	ws.subscribe(resourcev3.EndpointType, endpoints)
	ws.subscribe(resourcev3.SecretType, secrets)
	return nil
}

func (ws *watchState) subscribe(typeURL string, names []string) {
	sort.Strings(names)
	names = slices.Compact(names)
	cur, ok := ws.subscribed[typeURL]
	if ok && slices.Equal(cur, names) {
		return
	}
	if !ok && len(names) == 0 {
		return // never subscribed and nothing to ask for
	}
	ws.subscribed[typeURL] = names
	ws.w.Watch(typeURL, names, ws.handler(typeURL))
}

// typed returns the resources of one type, restricted to names when names
// is non-nil, in a stable order.
func typed[T proto.Message](m map[string]proto.Message, names []string) []T {
	keys := make([]string, 0, len(m))
	for k := range m {
		if names == nil || slices.Contains(names, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]T, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k].(T))
	}
	return out
}

// listenerRefs returns the RDS name and SDS secret names a listener uses.
func listenerRefs(l *listenerv3.Listener) (string, []string, error) {
	var rds string
	var secrets []string
	chains := append([]*listenerv3.FilterChain{}, l.GetFilterChains()...)
	if l.GetDefaultFilterChain() != nil {
		chains = append(chains, l.GetDefaultFilterChain())
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			hcm := &hcmv3.HttpConnectionManager{}
			if !f.GetTypedConfig().MessageIs(hcm) {
				continue
			}
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				return "", nil, err
			}
			if r := hcm.GetRds(); r != nil {
				rds = r.GetRouteConfigName()
			}
		}
		if ts := fc.GetTransportSocket(); ts != nil && ts.GetName() == transportSocketTLS {
			dtc := &tlsv3.DownstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(dtc); err != nil {
				return "", nil, err
			}
			secrets = append(secrets, sdsNames(dtc.GetCommonTlsContext())...)
		}
	}
	return rds, secrets, nil
}

// clusterRefs returns the EDS service name and SDS secret names a cluster
// uses.
func clusterRefs(c *clusterv3.Cluster) (string, []string, error) {
	var eds string
	if c.GetType() == clusterv3.Cluster_EDS {
		eds = c.GetEdsClusterConfig().GetServiceName()
		if eds == "" {
			eds = c.GetName()
		}
	}
	var secrets []string
	if ts := c.GetTransportSocket(); ts != nil && ts.GetName() == transportSocketTLS {
		utc := &tlsv3.UpstreamTlsContext{}
		if err := ts.GetTypedConfig().UnmarshalTo(utc); err != nil {
			return "", nil, err
		}
		secrets = sdsNames(utc.GetCommonTlsContext())
	}
	return eds, secrets, nil
}

func sdsNames(c *tlsv3.CommonTlsContext) []string {
	var out []string
	for _, s := range c.GetTlsCertificateSdsSecretConfigs() {
		out = append(out, s.GetName())
	}
	if v := c.GetValidationContextSdsSecretConfig(); v != nil {
		out = append(out, v.GetName())
	}
	return out
}
