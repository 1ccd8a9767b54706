# monky-deployd — `make help` lists the targets.
SHELL        := /bin/bash
VERSION      := $(shell cat VERSION)
MODULE       := scm.tikali.ai/tikali/applications/monky/monky-deployd
LDFLAGS      := -s -w -X $(MODULE)/internal/version.Version=$(VERSION)
GO           ?= go
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME     ?= 10s

.PHONY: help build test test-integration integration-setup lint bench fuzz demo clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## build bin/monky-deployd and bin/fleetctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/monky-deployd ./cmd/deployd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/fleetctl ./cmd/fleetctl

test: ## unit, CLI and fuzz-seed tests (no Docker needed)
	$(GO) vet ./...
	$(GO) test -count=1 ./...

integration-setup: ## install what the integration tests need (compose plugin, registry, OpenBao, ziti, box image)
	bash scripts/integration-setup.sh

test-integration: integration-setup ## tests against the real Docker engine, compose v2, registry and OpenBao
	CI=$${CI:-true} $(GO) test -count=1 -tags integration -timeout 40m ./...

fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
	  dir=$$(dirname $$f); \
	  for name in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | sed 's/^func //'); do \
	    echo "fuzz $$dir $$name"; \
	    $(GO) test -tags integration -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$dir; \
	  done; done

lint: ## go vet and staticcheck
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench: integration-setup ## benchmarks with their figures (see README), real-parts ones included
	$(GO) test -tags integration -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./...

clean: ## remove build output
	rm -rf bin dist

-include packaging/packaging.mk
-include devstack.mk
