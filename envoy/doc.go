// Package envoy owns what Switchyard gives Envoy, its production data plane:
// the bootstrap Envoy starts with (Bootstrap, RenderBootstrap), the rendering
// of the xDS resources the control plane serves it (SnapshotJSONLines), and
// the offline validator that proves both would load (ParseBootstrap,
// Validate).
//
// Envoy cannot run on the machines Switchyard is built and tested on, so
// every piece of Envoy configuration is checked here instead, the way Envoy
// checks it at load time: strict parsing of the bootstrap (unknown fields and
// unlinked typed_config types fail), protoc-gen-validate rules on every
// message including the contents of every Any, snapshot consistency, and the
// cross-resource checks Envoy makes that the proto rules cannot express (see
// Validate). `switchyard envoy validate` runs it; so does `make test`, on the
// bootstrap and the snapshot of every example and deploy configuration.
package envoy
