// Package e2e holds end-to-end tests: the whole Switchyard stack (control plane,
// extproc and data plane over real gRPC and xDS) driven by the official OpenAI
// Go SDK, against the fake vendor upstreams.
package e2e
