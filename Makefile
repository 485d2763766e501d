# Flotilla's build. `make run` starts a one-machine cluster; `make test` runs the suite.
# `make release` builds the release binaries, `make image` the container image,
# `make man` the man pages (docs/operations.md). `make cluster` (N=3) starts a
# cluster of N Docker containers running systemd and Flotilla, and prints the
# CLI's environment to eval; `make cluster-down` removes it (docs/cluster.md).
GO ?= go
BIN := bin/flotilla

# What `flotilla version` and flotilla_build_info report. VERSION is set for a
# release (make release VERSION=0.2.0); the commit and its time come from git.
# The build date is the commit's time, not the time of the build, so that two
# builds of a commit are the same file.
VERSION ?= 0.1.0-dev
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)$(shell test -n "$$(git status --porcelain --untracked-files=no 2>/dev/null)" && echo -dirty)
DATE := $(shell TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null)
SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
VPKG := github.com/flotilla/flotilla/internal/version
STAMP := -X $(VPKG).version=$(VERSION) -X $(VPKG).commit=$(COMMIT) -X $(VPKG).date=$(DATE)

# Release builds: static (no cgo, so they also run FROM scratch), without
# file paths, VCS stamping by Go or a random build ID, and stripped: the same
# commit and Go version give the same bytes.
PLATFORMS := linux/amd64 linux/arm64
RELEASE_FLAGS := -trimpath -buildvcs=false -ldflags '-s -w -buildid= $(STAMP)'
DIST := dist
ARCH ?= $(shell $(GO) env GOARCH)
IMAGE ?= flotilla:$(VERSION)

.PHONY: build run test test-short proto vet bench release man image cluster cluster-down

build:
	$(GO) build -ldflags '$(STAMP)' -o $(BIN) ./cmd/flotilla

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

# One static binary per platform, flotilla-OS-ARCH.
$(DIST)/flotilla-linux-%: FORCE
	@mkdir -p $(DIST)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build $(RELEASE_FLAGS) -o $@ ./cmd/flotilla
FORCE:

# Man pages from the commands' help, dated by the commit: man/man1/*.1.
MANDIR ?= man
man: build
	rm -rf $(MANDIR)/man1
	$(BIN) gen-man --dir $(MANDIR)/man1

# dist/: flotilla-linux-amd64, flotilla-linux-arm64, flotilla-man.tar.gz and
# SHA256SUMS of them. Check a download with: sha256sum -c --ignore-missing SHA256SUMS
release: build
	rm -rf $(DIST)
	$(MAKE) $(foreach p,$(PLATFORMS),$(DIST)/flotilla-$(subst /,-,$(p)))
	$(MAKE) man MANDIR=$(DIST)/man
	tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
		-C $(DIST)/man -cf - man1 | gzip -9n > $(DIST)/flotilla-man.tar.gz
	rm -rf $(DIST)/man
	cd $(DIST) && sha256sum flotilla-* > SHA256SUMS
	cat $(DIST)/SHA256SUMS

# The container image FROM scratch with the static binary for ARCH.
image: $(DIST)/flotilla-linux-$(ARCH)
	docker build --build-arg TARGETARCH=$(ARCH) -t $(IMAGE) .

# A cluster of N containers (Debian with systemd as PID 1) on a Docker
# network of its own, each running the static binary as flotilla.service
# with an embedded etcd member, mutual TLS and --acl (internal/cluster).
# Needs root and Docker. Its standard output is only the export lines of
# the CLI's environment (progress goes to standard error):
#   eval "$(make cluster)"
# CLUSTER_DIR keeps the certificates, the admin token and env. The binary
# is built static into bin/flotilla, for the containers and the host alike.
N ?= 3
CLUSTER_NAME ?= flotilla-cluster
CLUSTER_DIR ?= $(CURDIR)/flotilla-cluster
SUBNET ?=
cluster:
	@echo 'CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/flotilla' >&2
	@CGO_ENABLED=0 $(GO) build -ldflags '$(STAMP)' -o $(BIN) ./cmd/flotilla
	@$(GO) run ./contrib/cluster up -n $(N) -name $(CLUSTER_NAME) -dir $(CLUSTER_DIR) \
		-binary $(BIN) -unit contrib/systemd/flotilla.service $(if $(SUBNET),-subnet $(SUBNET))

cluster-down:
	@$(GO) run ./contrib/cluster down -name $(CLUSTER_NAME) -dir $(CLUSTER_DIR)
