package envoy

import (
	"fmt"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// TestExampleSnapshotsValidate runs the validator on the snapshot of every
// configuration in the repository, with the default bootstrap and with one
// that has a readiness listener.
func TestExampleSnapshotsValidate(t *testing.T) {
	for _, opts := range []BootstrapOptions{{}, {Readiness: "0.0.0.0:9902", ExtProc: "unix:/run/switchyard/extproc.sock"}} {
		b, err := Bootstrap(opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range exampleConfigs(t) {
			t.Run(e.name, func(t *testing.T) {
				if err := Check(b, e.snapshot(t)); err != nil {
					t.Errorf("Validate:\n%v", err)
				}
			})
		}
	}
}

// baseConfig is the production example with a bootstrap that has a
// readiness listener: every check has something to look at.
func baseConfig(t *testing.T) *Config {
	t.Helper()
	b, err := Bootstrap(BootstrapOptions{Readiness: "0.0.0.0:9902"})
	if err != nil {
		t.Fatal(err)
	}
	c := FromSnapshot(b, exampleConfig{name: "production", path: "../examples/production.yaml"}.snapshot(t))
	if err := Validate(c); err != nil {
		t.Fatalf("the base configuration does not validate:\n%v", err)
	}
	return c
}

// TestValidateRejects breaks one resource per check and expects the
// validator to name the resource, the field and the problem.
func TestValidateRejects(t *testing.T) {
	base := baseConfig(t)
	tests := []struct {
		name    string
		breakIt func(t *testing.T, c *Config)
		want    []string
	}{
		{"router not last", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) {
				f := h.HttpFilters
				f[1], f[2] = f[2], f[1]
			})
		}, []string{`listener "public"`, "http_filters[1]", "must be the last http filter", "http_filters[2]", "not the router"}},
		{"no router", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) { h.HttpFilters = h.HttpFilters[:2] })
		}, []string{`listener "public"`, "http_filters[1]", `"envoy.filters.http.ratelimit"`, "not the router"}},
		{"route to a missing cluster", func(t *testing.T, c *Config) {
			// The first model route comes after the backends' routes.
			c.Routes[0].VirtualHosts[0].Routes[len(controlplane.BackendPaths)].GetRoute().ClusterSpecifier =
				&routev3.RouteAction_Cluster{Cluster: "provider_nope"}
		}, []string{`route config "switchyard_routes"`, firstModelRoute + ".route.cluster", `cluster "provider_nope" does not exist`}},
		{"ext_proc cluster missing", func(t *testing.T, c *Config) { c.removeStaticCluster(catalog.ExtProcCluster) },
			[]string{`listener "public"`, "http_filters[0].typed_config.grpc_service.envoy_grpc.cluster_name", `gRPC cluster "switchyard_extproc" does not exist`}},
		{"ratelimit cluster missing", func(t *testing.T, c *Config) { c.removeStaticCluster(controlplane.RateLimitCluster) },
			[]string{`listener "sidecar"`, "rate_limit_service.grpc_service.envoy_grpc.cluster_name", `"switchyard_ratelimit" does not exist`}},
		{"ADS cluster missing", func(t *testing.T, c *Config) { c.removeStaticCluster(catalog.XDSCluster) },
			[]string{"bootstrap", "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name", `"switchyard_xds" does not exist`}},
		{"ADS cluster only in CDS", func(t *testing.T, c *Config) {
			xds := proto.Clone(c.cluster(t, catalog.XDSCluster)).(*clusterv3.Cluster)
			c.removeStaticCluster(catalog.XDSCluster)
			c.Clusters = append(c.Clusters, xds)
		}, []string{"bootstrap", "ads_config.grpc_services[0].envoy_grpc.cluster_name", "must be a static cluster"}},
		{"gRPC cluster without HTTP/2", func(t *testing.T, c *Config) {
			c.cluster(t, catalog.ExtProcCluster).TypedExtensionProtocolOptions = nil
		}, []string{`listener "public"`, "grpc_service.envoy_grpc.cluster_name", `"switchyard_extproc" is reached over gRPC but does not enable HTTP/2`}},
		{"ext_proc with grpc_service and http_service", func(t *testing.T, c *Config) {
			mutateExtProc(t, c.listener(t, "public"), func(ep *extprocv3.ExternalProcessor) {
				ep.HttpService = &extprocv3.ExtProcHttpService{HttpService: &corev3.HttpService{
					HttpUri: &corev3.HttpUri{Uri: "http://x/", HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: catalog.ExtProcCluster},
						Timeout: ep.GetMessageTimeout()},
				}}
			})
		}, []string{`listener "public"`, "http_filters[0].typed_config", "exactly one of grpc_service and http_service"}},
		{"ext_proc with neither service", func(t *testing.T, c *Config) {
			mutateExtProc(t, c.listener(t, "public"), func(ep *extprocv3.ExternalProcessor) { ep.GrpcService = nil })
		}, []string{`listener "public"`, "exactly one of grpc_service and http_service"}},
		{"FULL_DUPLEX_STREAMED without trailers", func(t *testing.T, c *Config) {
			mutateExtProc(t, c.listener(t, "public"), func(ep *extprocv3.ExternalProcessor) {
				ep.ProcessingMode.RequestBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
			})
		}, []string{`listener "public"`, "processing_mode.request_trailer_mode", "needs request_trailer_mode SEND"}},
		{"FULL_DUPLEX_STREAMED failing open", func(t *testing.T, c *Config) {
			mutateExtProc(t, c.listener(t, "public"), func(ep *extprocv3.ExternalProcessor) {
				ep.ProcessingMode.ResponseBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
				ep.ProcessingMode.ResponseTrailerMode = extprocv3.ProcessingMode_SEND
				ep.FailureModeAllow = true
			})
		}, []string{`listener "public"`, "processing_mode", "needs failure_mode_allow false"}},
		{"FULL_DUPLEX_STREAMED per-route override without trailers", func(t *testing.T, c *Config) {
			r := c.Routes[0].VirtualHosts[0].Routes[0]
			r.TypedPerFilterConfig[controlplane.FilterExtProc] = mustAny(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
				Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: &extprocv3.ProcessingMode{
					RequestBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
				}},
			}})
		}, []string{`route config "switchyard_routes"`, `routes[0].typed_per_filter_config["envoy.filters.http.ext_proc"].overrides.processing_mode.request_trailer_mode`}},
		{"receiving namespace missing", func(t *testing.T, c *Config) {
			mutateExtProc(t, c.listener(t, "sidecar"), func(ep *extprocv3.ExternalProcessor) { ep.MetadataOptions = nil })
		}, []string{`listener "sidecar"`, "metadata_options.receiving_namespaces.untyped", `lacks "switchyard"`}},
		{"SDS secret not served", func(t *testing.T, c *Config) { c.Secrets = nil },
			[]string{`listener "public"`, "transport_socket.typed_config.common_tls_context.tls_certificate_sds_secret_configs[0]", `secret "listener_public" is not served over SDS`}},
		{"SDS secret of the wrong kind", func(t *testing.T, c *Config) {
			c.Secrets[0].Type = &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/ca.pem"}},
			}}
		}, []string{`listener "public"`, "tls_certificate_sds_secret_configs[0]", `secret "listener_public" holds no tls_certificate`}},
		{"duplicate listener name", func(t *testing.T, c *Config) {
			c.Bootstrap.StaticResources.Listeners[0].Name = "public"
		}, []string{`listener "public"`, "name", `listener name "public" is also bootstrap static_resources.listeners[0]`}},
		{"duplicate listener address", func(t *testing.T, c *Config) {
			c.listener(t, "sidecar").Address = proto.Clone(c.listener(t, "public").GetAddress()).(*corev3.Address)
		}, []string{`listener "sidecar"`, "address", `0.0.0.0:8443 collides with listener "public"`}},
		{"listener on the wildcard's port", func(t *testing.T, c *Config) {
			c.listener(t, "sidecar").GetAddress().GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 9902}
		}, []string{`listener "sidecar"`, `127.0.0.1:9902 collides with bootstrap static_resources.listeners[0] "readiness"`}},
		{"duplicate cluster name", func(t *testing.T, c *Config) {
			c.Bootstrap.StaticResources.Clusters[0].Name = "provider_openai"
			c.Bootstrap.StaticResources.Clusters[0].LoadAssignment.ClusterName = "provider_openai"
		}, []string{`cluster "provider_openai"`, "name", "duplicate cluster name"}},
		{"PGV rule inside an Any", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) { h.StatPrefix = "" })
		}, []string{`listener "public"`, "StatPrefix"}},
		{"PGV rule two Anys deep", func(t *testing.T, c *Config) {
			mutateExtProc(t, c.listener(t, "public"), func(ep *extprocv3.ExternalProcessor) {
				ep.GrpcService.GetEnvoyGrpc().ClusterName = ""
			})
		}, []string{`listener "public"`, "ClusterName"}},
		{"typed_config of an unknown type", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) {
				h.HttpFilters[1].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/acme.NotLinked"}}
			})
		}, []string{`listener "public"`, "acme.NotLinked"}},
		{"route configuration not served", func(t *testing.T, c *Config) { c.Routes = nil },
			[]string{"snapshot", "not consistent", `listener "public"`, `rds.route_config_name`, `"switchyard_routes" is not served`}},
		{"EDS assignment missing", func(t *testing.T, c *Config) { c.Endpoints = nil },
			[]string{"snapshot", "not consistent"}},
		{"per-route config for a filter the listener lacks", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "sidecar"), func(h *hcmv3.HttpConnectionManager) {
				h.HttpFilters = []*hcmv3.HttpFilter{h.HttpFilters[0], h.HttpFilters[2]}
			})
		}, []string{`route config "switchyard_routes"`, `typed_per_filter_config["envoy.filters.http.ratelimit"]`, `listener "sidecar"`, "would be ignored"}},
		{"json_format with a null", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) {
				h.LocalReplyConfig.Mappers[0].BodyFormatOverride = &corev3.SubstitutionFormatString{
					Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{Fields: map[string]*structpb.Value{
						"error": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"param": structpb.NewNullValue()}}),
					}}},
				}
			})
		}, []string{`listener "public"`, "local_reply_config.mappers[0].body_format_override.json_format.error.param", "not *structpb.Value_NullValue"}},
		{"access log json_format with a boolean", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) {
				al := &streamv3.StdoutAccessLog{}
				if err := h.AccessLog[0].GetTypedConfig().UnmarshalTo(al); err != nil {
					t.Fatal(err)
				}
				al.GetLogFormat().GetJsonFormat().Fields["sampled"] = structpb.NewBoolValue(true)
				h.AccessLog[0].ConfigType = &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(al)}
			})
		}, []string{`listener "public"`, "access_log[0].typed_config.log_format.json_format.sampled", "not *structpb.Value_BoolValue"}},
		{"LOGICAL_DNS cluster with two endpoints", func(t *testing.T, c *Config) {
			la := c.cluster(t, "provider_openai").LoadAssignment
			la.Endpoints = append(la.Endpoints, proto.Clone(la.Endpoints[0]).(*endpointv3.LocalityLbEndpoints))
		}, []string{`cluster "provider_openai"`, "load_assignment", "exactly one locality with exactly one endpoint"}},
		{"rate limit service transport not V3", func(t *testing.T, c *Config) {
			mutateHCM(t, c.listener(t, "public"), func(h *hcmv3.HttpConnectionManager) {
				rl := &ratelimitv3.RateLimit{}
				if err := h.HttpFilters[1].GetTypedConfig().UnmarshalTo(rl); err != nil {
					t.Fatal(err)
				}
				rl.RateLimitService.TransportApiVersion = corev3.ApiVersion_AUTO
				h.HttpFilters[1].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(rl)}
			})
		}, []string{`listener "public"`, "rate_limit_service.transport_api_version", "must be V3"}},
		{"aggregate member missing", func(t *testing.T, c *Config) {
			mutateAggregate(t, c.cluster(t, "route_openai_gpt-4o-mini"), func(a *aggregatev3.ClusterConfig) { a.Clusters = append(a.Clusters, "provider_nope") })
		}, []string{`cluster "route_openai_gpt-4o-mini"`, "cluster_type.typed_config.clusters[1]", `cluster "provider_nope" does not exist`}},
		{"aggregate including itself", func(t *testing.T, c *Config) {
			mutateAggregate(t, c.cluster(t, "route_openai_gpt-4o-mini"), func(a *aggregatev3.ClusterConfig) {
				a.Clusters = append(a.Clusters, "route_openai_gpt-4o-mini")
			})
		}, []string{`cluster "route_openai_gpt-4o-mini"`, "clusters[1]", "cannot include itself"}},
		{"aggregate nesting an aggregate", func(t *testing.T, c *Config) {
			mutateAggregate(t, c.cluster(t, "route_openai_gpt-4o-mini"), func(a *aggregatev3.ClusterConfig) {
				a.Clusters = append(a.Clusters, "route_meta_llama-3_3-70b")
			})
		}, []string{`cluster "route_openai_gpt-4o-mini"`, "clusters[1]", "aggregates cannot be nested"}},
		{"aggregate listing a member twice", func(t *testing.T, c *Config) {
			mutateAggregate(t, c.cluster(t, "route_openai_gpt-4o-mini"), func(a *aggregatev3.ClusterConfig) { a.Clusters = append(a.Clusters, a.Clusters[0]) })
		}, []string{`cluster "route_openai_gpt-4o-mini"`, "clusters[1]", "listed twice"}},
		{"aggregate with a load balancing policy", func(t *testing.T, c *Config) {
			c.cluster(t, "route_openai_gpt-4o-mini").LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		}, []string{`cluster "route_openai_gpt-4o-mini"`, "lb_policy", "must use CLUSTER_PROVIDED"}},
		{"aggregate under another cluster type name", func(t *testing.T, c *Config) {
			c.cluster(t, "route_openai_gpt-4o-mini").GetClusterType().Name = "envoy.clusters.dynamic_forward_proxy"
		}, []string{`cluster "route_openai_gpt-4o-mini"`, "cluster_type.name", `"envoy.clusters.aggregate"`}},
		{"upstream codec not last", func(t *testing.T, c *Config) {
			mutateUpstream(t, c.cluster(t, "provider_openai"), func(po *upstreamhttpv3.HttpProtocolOptions) {
				po.HttpFilters[0], po.HttpFilters[1] = po.HttpFilters[1], po.HttpFilters[0]
			})
		}, []string{`cluster "provider_openai"`, `http_filters[0]`, "must be the last upstream http filter", `http_filters[1]`, "not envoy.filters.http.upstream_codec"}},
		{"upstream chain without the codec", func(t *testing.T, c *Config) {
			mutateUpstream(t, c.cluster(t, "provider_openai"), func(po *upstreamhttpv3.HttpProtocolOptions) { po.HttpFilters = po.HttpFilters[:1] })
		}, []string{`cluster "provider_openai"`, `http_filters[0]`, `"envoy.filters.http.ext_proc"`, "not envoy.filters.http.upstream_codec"}},
		{"upstream ext_proc cluster missing", func(t *testing.T, c *Config) {
			mutateUpstream(t, c.cluster(t, "provider_openai"), func(po *upstreamhttpv3.HttpProtocolOptions) {
				ep := &extprocv3.ExternalProcessor{}
				if err := po.HttpFilters[0].GetTypedConfig().UnmarshalTo(ep); err != nil {
					t.Fatal(err)
				}
				ep.GrpcService.GetEnvoyGrpc().ClusterName = "switchyard_nope"
				po.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(ep)}
			})
		}, []string{`cluster "provider_openai"`, "http_filters[0].typed_config.grpc_service.envoy_grpc.cluster_name", `gRPC cluster "switchyard_nope" does not exist`}},
		{"upstream ext_proc cluster without HTTP/2", func(t *testing.T, c *Config) {
			c.cluster(t, catalog.ExtProcCluster).TypedExtensionProtocolOptions = nil
		}, []string{`cluster "provider_openai"`, "http_filters[0].typed_config.grpc_service.envoy_grpc.cluster_name", "does not enable HTTP/2"}},
		{"upstream ext_proc without the receiving namespace", func(t *testing.T, c *Config) {
			mutateUpstream(t, c.cluster(t, "provider_groq"), func(po *upstreamhttpv3.HttpProtocolOptions) {
				ep := &extprocv3.ExternalProcessor{}
				if err := po.HttpFilters[0].GetTypedConfig().UnmarshalTo(ep); err != nil {
					t.Fatal(err)
				}
				ep.MetadataOptions = nil
				po.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(ep)}
			})
		}, []string{`cluster "provider_groq"`, "http_filters[0].typed_config.metadata_options.receiving_namespaces.untyped", `lacks "switchyard"`}},
		{"retry on an unknown condition", func(t *testing.T, c *Config) {
			modelRoute(t, c).GetRoute().GetRetryPolicy().RetryOn = "5xx,sometimes"
		}, []string{`route config "switchyard_routes"`, firstModelRoute + ".route.retry_policy.retry_on", `unknown retry condition "sometimes"`}},
		{"retriable status codes without the condition", func(t *testing.T, c *Config) {
			modelRoute(t, c).GetRoute().GetRetryPolicy().RetryOn = "5xx"
		}, []string{firstModelRoute + ".route.retry_policy.retriable_status_codes", "would be ignored"}},
		{"retry priority with the wrong config", func(t *testing.T, c *Config) {
			modelRoute(t, c).GetRoute().GetRetryPolicy().GetRetryPriority().ConfigType = &routev3.RetryPolicy_RetryPriority_TypedConfig{
				TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{})}
		}, []string{firstModelRoute + ".route.retry_policy.retry_priority.typed_config", "PreviousPrioritiesConfig"}},
		{"ADS transport not V3", func(t *testing.T, c *Config) {
			c.Bootstrap.DynamicResources.AdsConfig.TransportApiVersion = corev3.ApiVersion_AUTO
		}, []string{"bootstrap", "dynamic_resources.ads_config.transport_api_version", "must be V3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cloneConfig(base)
			tt.breakIt(t, c)
			err := Validate(c)
			if err == nil {
				t.Fatal("Validate accepted the broken configuration")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
	// The table broke copies: the base is still valid.
	if err := Validate(base); err != nil {
		t.Fatalf("base changed by a test case: %v", err)
	}
}

// modelRoute is the base configuration's first model route.
func modelRoute(t *testing.T, c *Config) *routev3.Route {
	t.Helper()
	r := c.Routes[0].VirtualHosts[0].Routes[len(controlplane.BackendPaths)]
	if r.GetRoute().GetRetryPolicy() == nil {
		t.Fatalf("route %q has no retry policy", r.GetName())
	}
	return r
}

// mutateAggregate rewrites an aggregate cluster's member list in place.
func mutateAggregate(t *testing.T, cl *clusterv3.Cluster, f func(*aggregatev3.ClusterConfig)) {
	t.Helper()
	a := &aggregatev3.ClusterConfig{}
	if err := cl.GetClusterType().GetTypedConfig().UnmarshalTo(a); err != nil {
		t.Fatal(err)
	}
	f(a)
	cl.GetClusterType().TypedConfig = mustAny(a)
}

// mutateUpstream rewrites a cluster's upstream HTTP protocol options (its
// upstream filter chain) in place.
func mutateUpstream(t *testing.T, cl *clusterv3.Cluster, f func(*upstreamhttpv3.HttpProtocolOptions)) {
	t.Helper()
	po := &upstreamhttpv3.HttpProtocolOptions{}
	if err := cl.GetTypedExtensionProtocolOptions()[controlplane.HTTPProtocolOptionsKey].UnmarshalTo(po); err != nil {
		t.Fatal(err)
	}
	f(po)
	cl.TypedExtensionProtocolOptions[controlplane.HTTPProtocolOptionsKey] = mustAny(po)
}

// TestValidateOptions: the namespaces an external processor writes are a
// parameter.
func TestValidateOptions(t *testing.T) {
	c := baseConfig(t)
	err := Validate(c, Options{ExtProcNamespaces: []string{catalog.MetadataNamespace, "acme"}})
	if err == nil || !strings.Contains(err.Error(), `lacks "acme"`) {
		t.Errorf("err = %v", err)
	}
}

func TestParseBootstrapStrict(t *testing.T) {
	good, err := RenderBootstrap(BootstrapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBootstrap(good); err != nil {
		t.Fatalf("rendered bootstrap does not parse: %v", err)
	}
	tests := []struct {
		name, from, to, want string
	}{
		{"unknown field", "set_node_on_first_message_only: true", "set_node_on_first_message_only: true\n    colour: red", "colour"},
		{"misspelled field", "connect_timeout: 5s", "connect_timout: 5s", "connect_timout"},
		{"wrong type", "port_value: 18000", "port_value: eighteen-thousand", "eighteen-thousand"},
		{"unlinked typed_config", "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"type.googleapis.com/acme.Unknown", "acme.Unknown"},
		{"not YAML", "node:", "node: [", "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(string(good), tt.from, tt.to, 1)
			if src == string(good) {
				t.Fatalf("%q not found in the rendered bootstrap", tt.from)
			}
			_, err := ParseBootstrap([]byte(src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := ParseBootstrap([]byte("# nothing\n")); err == nil {
		t.Error("empty bootstrap accepted")
	}
}

// firstModelRoute is where the first model route sits: after the backends'.
var firstModelRoute = fmt.Sprintf("virtual_hosts[0].routes[%d]", len(controlplane.BackendPaths))
