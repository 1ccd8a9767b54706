# monky-deployd — `make help` lists the targets.
SHELL        := /bin/bash
VERSION      := $(shell cat VERSION)
MODULE       := scm.tikali.ai/tikali/applications/monky/monky-deployd
# The commit and build date `version` and `--version` print (SOURCE_DATE_EPOCH: a reproducible date).
COMMIT       ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
BUILD_DATE   ?= $(shell date -u -d "@$${SOURCE_DATE_EPOCH:-$$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS      := -s -w -X $(MODULE)/internal/shared/version.Version=$(VERSION) \
                -X $(MODULE)/internal/shared/version.Commit=$(COMMIT) -X $(MODULE)/internal/shared/version.Date=$(BUILD_DATE)
GO           ?= go
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME     ?= 10s
# The modules: the agent's (here), packaging/'s own (the .deb tools and their tests, which need
# nfpm) and tools/mutate (the mutation tester, gremlins); modules of their own keep nfpm and
# gremlins out of the agent's module graph. `./...` of one module stops at another's go.mod, so
# every go target runs in each.
MODULES      := . packaging tools/mutate
# make mutate: the packages that hold decisions (under internal/), smallest first, one at a time
# with one worker; a mutant's tests may take COEFFICIENT × the package's plain test run, timed by
# gremlins' own coverage run (GOFLAGS=-count=1: a cached test result timed it at a few hundred
# milliseconds, and every mutant that did not fail at once was counted TIMED OUT).
MUTATE_PKGS  ?= shared/protocol shared/secret agent/token fleet/verdict fleet/report agent/release agent/state agent/bundle agent/tick
MUTATE_TIMEOUT_COEFFICIENT ?= 20
MUTATE_OUT   ?= bin/mutate

.PHONY: help build test tidy-check test-integration integration-setup prometheus-deps test-rules lint bench fuzz mutate demo clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## build bin/monky-deployd and bin/fleetctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/monky-deployd ./cmd/deployd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/fleetctl ./cmd/fleetctl

test: ## unit, CLI and fuzz-seed tests (no Docker needed)
	set -e; for m in $(MODULES); do $(GO) -C $$m vet ./...; done
	set -e; for m in $(MODULES); do $(GO) -C $$m test -count=1 -timeout 30m ./...; done

tidy-check: ## fail when `go mod tidy` would change go.mod or go.sum of any module
	set -e; for m in $(MODULES); do echo "go mod tidy -diff in $$m"; $(GO) -C $$m mod tidy -diff; done

integration-setup: ## install what the integration tests need (compose plugin, registry, OpenBao, ziti, box image)
	bash scripts/integration-setup.sh

# CI defaults to true here: every part is promised, so a test that skips fails the run (noskip
# reads the -json stream; t.Skip inside a fuzz target filters an input and is no skipped test; a
# package that passes without running a test, as after a TestMain that exits before m.Run, fails).
test-integration: integration-setup ## tests against the real Docker engine, compose v2, registry and OpenBao; fails on any skipped test
	$(GO) build -o bin/noskip ./internal/dev/cmd/noskip
	@# The modules run side by side (the packaging module's box tests wait on systemd in
	@# containers, the agent's on compose and the mesh); each line says which module it is from.
	set -o pipefail; pids=(); for m in $(MODULES); do \
	  echo "== go test -tags integration in $$m"; \
	  ( CI=$${CI:-true} $(GO) -C $$m test -json -count=1 -tags integration -timeout 40m ./... | bin/noskip 2>&1 | sed -u "s|^|[$$m] |" ) & pids+=($$!); \
	done; \
	rc=0; for p in "$${pids[@]}"; do wait $$p || rc=1; done; \
	if [ $$rc -ne 0 ]; then echo "test-integration: FAILED (the lines above say which module)" >&2; fi; exit $$rc

fuzz: ## run every fuzz target for FUZZTIME each (a duration or a count, e.g. 3000x); fails if any target fails
	@# One instrumented test binary per package (go test -c -fuzz), each target run from it in the
	@# package's directory (testdata/fuzz is read there and a failing input written there): -fuzz
	@# takes one target a run, and building per target cost a build each, 36 of them.
	@stale=""; \
	for d in $$(find . -path '*/testdata/fuzz/*' -type d -name 'Fuzz*' | sort); do \
	  pkg=$$(dirname $$(dirname $$(dirname $$d))); \
	  grep -qs "^func $$(basename $$d)(" $$pkg/*_test.go || stale="$$stale $$d"; \
	done; \
	if [ -n "$$stale" ]; then echo "fuzz: corpus of no fuzz target (a deleted or renamed one):$$stale" >&2; exit 1; fi
	@targets=0; failed=""; bins=$$(mktemp -d); trap 'rm -rf "$$bins"' EXIT; \
	for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  bin="$$bins/$$(echo "$$dir" | tr '/.' '__').test"; \
	  echo "fuzz: build $$dir"; \
	  if ! $(GO) -C $$dir test -c -tags integration -fuzz . -o "$$bin" . ; then failed="$$failed $$dir:build"; continue; fi; \
	  cache="$$($(GO) env GOCACHE)/fuzz/$$($(GO) -C $$dir list -tags integration -f '{{.ImportPath}}' .)"; \
	  for name in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | sed 's/^func //' | sort); do \
	    targets=$$((targets+1)); \
	    echo "fuzz $$dir $$name"; \
	    (cd $$dir && "$$bin" -test.run '^$$' -test.fuzz "^$$name$$" -test.fuzztime $(FUZZTIME) \
	      -test.fuzzcachedir "$$cache" -test.timeout 15m) || failed="$$failed $$dir:$$name"; \
	  done; done; \
	if [ "$$targets" -eq 0 ]; then echo "fuzz: no fuzz target found" >&2; exit 1; fi; \
	if [ -n "$$failed" ]; then echo "fuzz: FAILED (the failing input is under the package's testdata/fuzz):$$failed" >&2; exit 1; fi; \
	echo "fuzz: $$targets target(s) passed"

mutate: ## mutation testing (gremlins) of the packages that hold decisions: each one's efficacy and survivors (hours; not in .ci/run)
	$(GO) -C tools/mutate build -o $(CURDIR)/bin/gremlins github.com/go-gremlins/gremlins/cmd/gremlins
	$(GO) -C tools/mutate build -o $(CURDIR)/bin/mutate-report .
	mkdir -p $(MUTATE_OUT)
	set -e; for p in $(MUTATE_PKGS); do \
	  echo "== mutate internal/$$p"; \
	  GOFLAGS=-count=1 bin/gremlins unleash --workers 1 --timeout-coefficient $(MUTATE_TIMEOUT_COEFFICIENT) --exclude-files '[a-z]test/' \
	    --output $(MUTATE_OUT)/$$(echo $$p | tr / -).json $(CURDIR)/internal/$$p; \
	done
	bin/mutate-report $(foreach p,$(MUTATE_PKGS),$(MUTATE_OUT)/$(subst /,-,$(p)).json)

prometheus-deps: ## apt-install Debian's prometheus (promtool) and prometheus-node-exporter (as root)
	bash scripts/prometheus-deps.sh

test-rules: ## promtool check rules and promtool test rules on the shipped alert rules
	cd packaging/prometheus && promtool check rules monky-deployd.rules.yml && promtool test rules monky-deployd.rules.test.yml

lint: ## gofmt, go vet and staticcheck
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt-formatted:"; echo "$$unformatted"; exit 1; fi
	set -e; for m in $(MODULES); do $(GO) -C $$m vet ./...; done
	set -e; for m in $(MODULES); do $(GO) -C $$m run $(STATICCHECK) ./...; done

bench: integration-setup ## benchmarks with their figures (see README), real-parts ones included
	set -e; for m in $(MODULES); do $(GO) -C $$m test -tags integration -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./...; done
	bash scripts/bench-fuzz.sh

clean: ## remove build output
	rm -rf bin dist

-include packaging/packaging.mk
-include devstack.mk
