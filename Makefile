# Switchyard: `make run` starts the gateway on the embedded default config;
# `make test` runs every test (unit, contract, end to end).
GO       ?= go
BIN      := bin/switchyard
DATA_DIR ?= .data
LISTEN   ?= 127.0.0.1:8080

.PHONY: build run test vet lint test-deps spec-check

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/switchyard

run: build
	./$(BIN) run --data-dir $(DATA_DIR) --listen $(LISTEN) --demo-key

vet:
	$(GO) vet ./...

# Fleet-mode rate-limit tests need a real redis-server (Debian package), the metrics
# and alert-rule checks Prometheus' promtool (Debian package prometheus), and the
# fleet-storage tests a real PostgreSQL (Debian's postgresql: initdb and postgres,
# run by internal/testing/pgtest) and an S3-compatible store (versitygw, pinned, built
# with go install into bin/versitygw-$(VERSITYGW_VERSION), run by internal/testing/s3test).
# The npm SDK tests (e2e TestNPMSDKs) need Node.js $(NODE_MIN)+ with npm; the test
# itself runs `npm ci` into e2e/npm/node_modules when that is missing or stale.
# Install them when missing (apt-get only as root); otherwise those tests skip and
# say why, except in CI (CI set), where they fail.
VERSITYGW_VERSION := v1.8.0
NODE_MIN := 20
test-deps:
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null 2>&1; }; }; } || \
	  echo "note: redis-server could not be installed; fleet-mode rate-limit tests will be skipped"
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1; }; }; } || \
	  echo "note: postgresql could not be installed; fleet-storage (Postgres) tests will be skipped (fail in CI)"
	@[ -x bin/versitygw-$(VERSITYGW_VERSION) ] || { rm -rf bin/.versitygw && \
	  GOBIN=$(CURDIR)/bin/.versitygw GOFLAGS= $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION) && \
	  mv bin/.versitygw/versitygw bin/versitygw-$(VERSITYGW_VERSION) && rm -rf bin/.versitygw; } || \
	  echo "note: versitygw could not be installed; fleet-storage (S3) tests will be skipped (fail in CI)"
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; }; }; } || \
	  echo "note: promtool could not be installed; the metrics and alert-rule checks will be skipped"
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm >/dev/null 2>&1; }; }; } || true
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= $(NODE_MIN) ? 0 : 1)' >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || \
	  echo "note: Node.js $(NODE_MIN)+ with npm is not installed; the npm SDK tests (e2e TestNPMSDKs) will be skipped (fail in CI)"

# The contract tests validate bodies against the official OpenAI spec: shared/ checked
# out beside this repository, or the file $$SWITCHYARD_OPENAPI names. Without it they
# skip, so say so in one line; in CI (CI set) a missing spec fails the run.
OPENAPI_SPEC = $(or $(SWITCHYARD_OPENAPI),../shared/openapi/openapi.normalized.yaml)
spec-check:
	@if [ ! -f "$(OPENAPI_SPEC)" ]; then \
	  if [ -n "$$CI" ]; then echo "error: OpenAI spec $(OPENAPI_SPEC) not found: CI must run the contract tests (check out shared/ beside the repository or set SWITCHYARD_OPENAPI)" >&2; exit 1; fi; \
	  echo "NOTE: OpenAI spec $(OPENAPI_SPEC) not found: contract tests are SKIPPED (set SWITCHYARD_OPENAPI, see README)"; \
	fi

# The linter, pinned, installed into bin/ when missing (configuration: staticcheck.conf).
STATICCHECK_VERSION := v0.8.2
lint:
	@[ -x bin/staticcheck ] && bin/staticcheck -version 2>/dev/null | grep -q "$(STATICCHECK_VERSION:v%=%)" || \
	  GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	bin/staticcheck ./...

# Packages with concurrency run under the race detector; the rest without it.
# ratelimit runs in both passes: one case drives envoyproxy/ratelimit's own
# service, which races in SetConfig, and is checked in the non-race pass.
RACE_PKGS := ./envoy/dataplane/... ./extproc/... ./ratelimit/... ./backends/... ./internal/keys/... ./internal/inprocgrpc/...

# -count=1: never trust the test cache in CI; the contract tests read ../shared.
test: build vet lint test-deps spec-check
	$(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -v -E '/(envoy/dataplane|extproc|backends|internal/keys|internal/inprocgrpc)(/|$$)')
	$(GO) test -count=1 -race -timeout 15m $(RACE_PKGS)
	@# Every benchmark once, so none rots unnoticed until make bench (numbers: make bench).
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./...

# The chaos and soak run (e2e/soak): a fleet of real processes on loopback under a mixed
# openai-go workload while faults are injected on a schedule; prints the report and fails
# when a target is missed. make test runs its short version (about a minute); this one
# runs the workload for SOAK_DURATION (docs/operations.md, "Soak and chaos").
SOAK_DURATION ?= 10m
.PHONY: soak
soak: test-deps
	$(GO) test -count=1 -v -timeout 0 -run '^TestSoak$$' ./e2e/soak/ -args -soak.duration=$(SOAK_DURATION)

# Benchmarks (cmd/bench): latency Switchyard adds over a direct call, side by side with
# nginx and the Portkey gateway; streaming; hot-path microbenchmarks; peak RSS; file
# upload/download and batch throughput on embedded and fleet storage. Writes
# docs/benchmarks.md and docs/benchmarks-latency.svg. Installs nginx (apt) and the
# Portkey gateway (npm, into cmd/bench/.cache) when missing, and for the storage section
# PostgreSQL (apt) and versitygw (go install into bin/) as the fleet-storage tests do.
# `go run ./cmd/bench -only storage` reruns the storage section alone, in place.
# Not part of `make test`.
.PHONY: bench
bench: build
	$(GO) run ./cmd/bench -bin $(BIN) -go $(GO)
