# `make demo` (included by the Makefile): see scripts/demo.sh and internal/dev/devstack.
.PHONY: demo

demo: ## build everything and watch 5 agents deploy; fleetctl catches a silent and a failing box
	GO="$(GO)" bash scripts/demo.sh
