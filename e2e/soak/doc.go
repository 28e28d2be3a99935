// Package soak is the chaos and soak harness (its tests only): a small
// fleet of real processes on loopback, built from this tree (one
// `switchyard controlplane`, three gateways of `switchyard dataplane` +
// `switchyard extproc`, two `switchyard backends`), on a real PostgreSQL,
// S3 server (versitygw) and Redis behind envoyproxy/ratelimit's service,
// with fake vendors in two regions behind fault switches. TestSoak drives a
// mixed workload through the official openai-go SDK while it injects
// faults on a schedule, then prints a report and asserts its targets.
//
// `make test` runs the short version (about a minute), in its pass without
// the race detector: envoyproxy/ratelimit's service, which the harness
// hosts, races in SetConfig when the restarted control plane sends its
// configuration again (as the ratelimit package's case does). `make soak`
// runs the long one (SOAK_DURATION, 10 minutes by default). See
// docs/operations.md, "Soak and chaos".
package soak
