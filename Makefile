# Switchyard: `make run` starts the gateway on the embedded default config;
# `make test` runs every test (unit, contract, end to end).
GO       ?= go
BIN      := bin/switchyard
DATA_DIR ?= .data
LISTEN   ?= 127.0.0.1:8080

.PHONY: build run test vet

build:
	$(GO) build -o $(BIN) ./cmd/switchyard

run: build
	./$(BIN) run --data-dir $(DATA_DIR) --listen $(LISTEN) --demo-key

vet:
	$(GO) vet ./...

# -count=1: never trust the test cache in CI; the contract tests read ../shared.
test: build vet
	$(GO) test -count=1 -timeout 15m ./...
