# Every Go module in the repository (the root and any nested one).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test lint demo bench fmt

## test: every test of every module. scripts/test installs what the tests need
## when it is missing (or stops at once saying what to install), then runs the
## gofmt check, go vet and go test -race of each module, every module even when
## one fails, and prints a summary. RACE= tests without the race detector.
test:
	@scripts/test

## lint: staticcheck of every module (fetched through the Go module proxy)
lint:
	@set -e; for m in $(MODULES); do (cd $$m && go run $(STATICCHECK) ./...); done

## demo: the 2FA saga demo on an embedded nats-server
demo:
	go run ./examples/twofactor/demo

## bench: transport benchmarks beside raw nats.go baselines
bench:
	go run ./cmd/jetsaga-bench

fmt:
	gofmt -w $(MODULES)
