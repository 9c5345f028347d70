# Every Go module in the repository (the root and any nested one).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test lint demo bench bench-check bench-peers fmt release-check release

## test: every test of every module. scripts/test installs what the tests need
## when it is missing (or stops at once saying what to install), then runs the
## gofmt check, go vet and go test -race of each module, every module even when
## one fails, as up to JOBS (1) concurrent jobs (the transport's conformance
## suite first), and prints each package's time and a summary. RACE= tests
## without the race detector; SUITE_PARALLEL (6) bounds the suite's cases
## running at once in each of its two test binaries (go test -parallel).
test:
	@scripts/test

## lint: staticcheck of every module (fetched through the Go module proxy)
lint:
	@set -e; for m in $(MODULES); do (cd $$m && go run $(STATICCHECK) ./...); done

## release-check: pack every released module at the version the nested
## modules require into a file module proxy, then go install both jetsaga
## commands and build and run a consumer module from it, and check that
## go mod tidy changes nothing (internal/release)
release-check:
	go run ./internal/release check

## release: VERSION=vX.Y.Z bumps every module's requirement of jetsaga's
## modules and go.work together, writes their go.sum lines, checks the
## release as release-check does, commits, and tags the root and each
## released nested module. CHANGELOG.md must have the version's section.
release:
	@[ -n "$(VERSION)" ] || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	@grep -q '^## \[$(patsubst v%,%,$(VERSION))\]' CHANGELOG.md || { echo "CHANGELOG.md has no section ## [$(patsubst v%,%,$(VERSION))]"; exit 2; }
	@[ -z "$$(git status --porcelain)" ] || { echo "the working tree has changes: commit them first"; exit 2; }
	go run ./internal/release prepare $(VERSION)
	go run ./internal/release check
	git commit -qam "release $(VERSION)"
	git tag $(VERSION)
	git tag calendar/holidays/$(VERSION)
	git tag saga/pgstore/$(VERSION)
	git tag saga/sagaotel/$(VERSION)
	git tag timeout/temporal/$(VERSION)

## demo: the 2FA saga demo on an embedded nats-server
demo:
	go run ./examples/twofactor/demo

## bench: transport benchmarks beside raw nats.go baselines
bench:
	go run ./cmd/jetsaga-bench

## bench-check: before a change to the hot path lands (receive, step, commit,
## settle; the transport's send, receive and cancel): the saga, schedule, send
## and cancel benches of the working tree and of BASE (default: where the
## branch left main; HEAD~1 on main) in ROUNDS interleaved rounds, each figure
## as a ratio to its raw nats.go baseline beside its target and the change.
## Exits 1 when a figure got worse by more than 5%. Not part of make test:
## these machines are noisy; run it on an idle one.
bench-check:
	go run ./internal/benchcheck $(if $(BASE),-base $(BASE)) $(if $(ROUNDS),-rounds $(ROUNDS))

## bench-peers: jetsaga beside River, DBOS and Temporal on the same workloads,
## each beside raw nats.go (benchmarks/peers; starts PostgreSQL, installing it
## with apt-get as root when missing, and the Temporal dev server). Not part of
## make test: it takes minutes; make test builds and unit-tests it.
bench-peers:
	go run ./benchmarks/peers

fmt:
	gofmt -w $(MODULES)
