# Flotilla's build. `make run` starts a one-machine cluster; `make test` runs the suite.
GO ?= go
BIN := bin/flotilla

.PHONY: build run test test-short proto vet bench

build:
	$(GO) build -o $(BIN) ./cmd/flotilla

run: build
	$(BIN) dev --data-dir flotilla-dev

# The whole suite: unit tests, then the multi-process integration tests.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

test-short:
	$(GO) test -short -count=1 ./...

# Regenerate proto/agentpb and proto/supervisorpb (needs protoc: apt-get install protobuf-compiler).
proto:
	$(GO) generate ./proto/...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
