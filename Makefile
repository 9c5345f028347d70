# Every Go module in the repository (the root and any nested one), so that
# `make test` covers them all.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)

# The race detector needs cgo and a C compiler; without them `make test`
# runs the tests without it (and says so). RACE= forces that.
RACE ?= $(shell [ "$$(go env CGO_ENABLED)" = 1 ] && command -v "$$(go env CC)" >/dev/null 2>&1 && echo -race)

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test lint demo bench fmt

## test: gofmt check, go vet and go test -race of every module
test:
	@unformatted=$$(gofmt -l $(MODULES)); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@[ -n "$(RACE)" ] || echo "no cgo or C compiler ($$(go env CC)): testing without the race detector"
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && go vet ./... && go test $(RACE) -shuffle=on -count=1 -timeout 20m ./...); \
	done

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
