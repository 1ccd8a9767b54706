# packaging/packaging.mk — the .deb and its tests. Included by the Makefile; also works alone:
#   make -f packaging/packaging.mk deb
# Every variable is prefixed PKG_ so the including Makefile's own names are untouched.
# packaging/ is a Go module of its own (nfpm stays out of the agent's module graph): its tools are
# built with `go -C packaging` and run from the repository root, where their relative paths point.

PKG_GO           ?= go
PKG_VERSION      ?= $(shell cat VERSION)
# The packages' version: a semver pre-release as Debian's ~ (0.3.0-rc1 → 0.3.0~rc1).
PKG_DEBVERSION   := $(subst -,~,$(PKG_VERSION))
PKG_MODULE       := scm.tikali.ai/tikali/applications/monky/monky-deployd
PKG_COMMIT       ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
PKG_BUILD_DATE   ?= $(shell date -u -d "@$${SOURCE_DATE_EPOCH:-$$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ)
PKG_LDFLAGS      ?= -s -w -X $(PKG_MODULE)/internal/shared/version.Version=$(PKG_VERSION) \
                    -X $(PKG_MODULE)/internal/shared/version.Commit=$(PKG_COMMIT) -X $(PKG_MODULE)/internal/shared/version.Date=$(PKG_BUILD_DATE)
PKG_ARCH         ?= amd64
PKG_DIST         ?= dist
# Prebuilt binaries to package instead of building cmd/deployd and cmd/fleetctl (tests only).
PKG_DEPLOYD_BIN  ?=
PKG_FLEETCTL_BIN ?=
# Reproducible file times: the last commit's time (empty outside a git checkout = now).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
export SOURCE_DATE_EPOCH

.PHONY: deb deb-check test-packaging packaging-deps

deb: ## build dist/monky-deployd_<version>_amd64.deb, dist/monky-fleetctl_<version>_amd64.deb, dist/install.sh (version stamped) and dist/SHA256SUMS
	@set -eu; \
	mkdir -p "$(PKG_DIST)/bin"; \
	deployd="$(PKG_DEPLOYD_BIN)"; fleetctl="$(PKG_FLEETCTL_BIN)"; \
	if [ -z "$$deployd" ]; then \
	  deployd="$(PKG_DIST)/bin/monky-deployd"; \
	  echo "deb: building $$deployd $(PKG_VERSION)"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) $(PKG_GO) build -trimpath -ldflags "$(PKG_LDFLAGS)" -o "$$deployd" ./cmd/deployd; \
	fi; \
	if [ -z "$$fleetctl" ]; then \
	  fleetctl="$(PKG_DIST)/bin/fleetctl"; \
	  echo "deb: building $$fleetctl $(PKG_VERSION)"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) $(PKG_GO) build -trimpath -ldflags "$(PKG_LDFLAGS)" -o "$$fleetctl" ./cmd/fleetctl; \
	fi; \
	tools=$$(mktemp -d); trap 'rm -rf "$$tools"' EXIT; \
	$(PKG_GO) -C packaging build -o "$$tools/mkdeb" ./mkdeb; \
	debs=$$("$$tools/mkdeb" -version "$(PKG_VERSION)" -arch "$(PKG_ARCH)" \
	  -deployd "$$deployd" -fleetctl "$$fleetctl" -packaging packaging -out "$(PKG_DIST)" \
	  -modcache "$$($(PKG_GO) env GOMODCACHE)" -goroot "$$($(PKG_GO) env GOROOT)"); \
	sed 's/^DEFAULT_VERSION="@VERSION@"$$/DEFAULT_VERSION="$(PKG_VERSION)"/' packaging/install.sh >"$(PKG_DIST)/install.sh"; \
	grep -q '^DEFAULT_VERSION="$(PKG_VERSION)"$$' "$(PKG_DIST)/install.sh" || { echo "deb: install.sh lost its DEFAULT_VERSION line" >&2; exit 1; }; \
	chmod 0755 "$(PKG_DIST)/install.sh"; \
	names=""; for d in $$debs; do names="$$names $${d##*/}"; done; \
	(cd "$(PKG_DIST)" && sha256sum $$names install.sh >SHA256SUMS); \
	for d in $$debs; do echo "deb: $$d"; done

deb-check: ## lintian on both packages (any error or warning fails) and the units' systemd-analyze security scores
	@set -eu; \
	command -v lintian >/dev/null || { echo "deb-check: lintian not found (scripts/packaging-deps.sh installs it)" >&2; exit 1; }; \
	for d in "$(PKG_DIST)"/monky-deployd_$(PKG_DEBVERSION)_$(PKG_ARCH).deb "$(PKG_DIST)"/monky-fleetctl_$(PKG_DEBVERSION)_$(PKG_ARCH).deb; do \
	  [ -f "$$d" ] || { echo "deb-check: $$d not built (make deb)" >&2; exit 1; }; \
	done; \
	echo "deb-check: lintian (fails on any error or warning; overrides: packaging/lintian/)"; \
	lintian --fail-on error,warning --tag-display-limit 0 --allow-root \
	  "$(PKG_DIST)"/monky-deployd_$(PKG_DEBVERSION)_$(PKG_ARCH).deb "$(PKG_DIST)"/monky-fleetctl_$(PKG_DEBVERSION)_$(PKG_ARCH).deb; \
	dist=$$(cd "$(PKG_DIST)" && pwd); \
	$(PKG_GO) -C packaging run ./checkunits -dist "$$dist" -version "$(PKG_DEBVERSION)" -arch "$(PKG_ARCH)"

packaging-deps: ## apt-install the tools test-packaging needs (dpkg, busybox-static, shellcheck, ansible, ...)
	bash scripts/packaging-deps.sh

test-packaging: packaging-deps ## the .deb under real dpkg in a chroot, install.sh end to end, ansible role, CI file (needs root)
	CI=$${CI:-true} $(PKG_GO) -C packaging test -count=1 -tags integration -timeout 30m ./...
