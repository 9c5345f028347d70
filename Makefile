# Every Go module in the repository (the root and nested ones, e.g. the
# Temporal backend), so that `make test` covers them all.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test lint demo bench fmt

## test: gofmt check, go vet and go test -race of every module
test:
	@unformatted=$$(gofmt -l $(MODULES)); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && go vet ./... && go test -race -shuffle=on -count=1 -timeout 20m ./...); \
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
