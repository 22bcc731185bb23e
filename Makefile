# troupe — the two commands that do everything on a fresh machine:
#   make demo   run the main job
#   make test   vet and test everything (what CI runs)
GO      ?= go
# Packages whose tests run under the race detector (the concurrent ones).
RACE_PKGS ?= ./tensor/... ./swarm/...

.PHONY: all test vet demo bench bench-compare data clean

all: test

vet:
	$(GO) vet ./...

test: vet
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race -short $(RACE_PKGS)

demo:
	$(GO) run ./cmd/demo

bench:
	$(GO) test ./benchmarks -bench . -run '^$$'

bench-compare:
	bash benchmarks/compare/run.sh

# Real data of examples/translation (pinned, sha256-verified, idempotent) into data/translation.
data:
	bash examples/translation/fetch-data.sh

clean:
	rm -rf out bin
