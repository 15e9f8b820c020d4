# Sandgate — the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: run test build generate check-generate vet lint

## run: start the gateway in development mode (throwaway Postgres, dev OIDC issuer, local and,
## with a Docker engine, docker profiles); bin/sandboxd next to bin/gateway is what the docker
## provider copies into images that do not ship sandboxd
run: build
	@scripts/run-setup.sh
	bin/gateway dev

## test: set the machine up for every suite (scripts/test-setup.sh: Debian packages, Docker
## engine and sandbox image, kube-apiserver; idempotent and cached), then run every test
## against real components; the summary at the end lists each skipped test and why
test:
	@exports=$$(scripts/test-setup.sh) && eval "$$exports" && \
	  $(GO) tool gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg -- -count=1 -timeout 30m ./...

## VERSION is stamped into the gateway (`gateway version`, /healthz): the git description of
## the checkout, or "dev" outside git. Override: make build VERSION=1.2.3
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

## build: the gateway, the sandgate CLI and sandboxd (static: the docker provider copies it
## into containers of images that do not ship it) into bin/
build:
	$(GO) build -ldflags='-X main.version=$(VERSION)' -o bin/gateway ./cmd/gateway
	$(GO) build -ldflags='-X main.version=$(VERSION)' -o bin/sandgate ./cmd/sandgate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/sandboxd ./cmd/sandboxd

generate:
	$(GO) generate ./...

## check-generate: fail when generated code is stale
check-generate: generate
	git diff --exit-code -- internal/api/apigen pkg/client config.schema.json

vet:
	$(GO) vet ./...

## lint: staticcheck with the checks of staticcheck.conf; .ci/run requires no findings
lint:
	$(GO) tool staticcheck ./...

.PHONY: kube-e2e
## kube-e2e: the kubernetes provider's tests on a real single-node cluster (kubelet with
## cri-dockerd on the Docker engine, the real agent-sandbox controller; see
## internal/testutil/kubenode). Needs root; the first run builds the node's binaries
## (scripts/kube-setup.sh --node, about 25 CPU-minutes cold, cached). The host is restored after.
kube-e2e:
	@scripts/docker-setup.sh >&2 && exports=$$(scripts/kube-setup.sh --node) && eval "$$exports" && \
	  TEST_KUBE_NODE=1 nice -n 10 $(GO) test -count=1 -timeout 30m -run '^TestNode' -v ./internal/providers/kubernetes

.PHONY: kube-up kube-down
## kube-up: keep the same single-node cluster up (root) for `make run`: writes
## .sandgate/kube/kubeconfig and .sandgate/kube/gateway.yaml (a kubernetes profile on it:
## SANDGATE_CONFIG=.sandgate/kube/gateway.yaml make run); make kube-down tears it down and
## restores the host
kube-up:
	@scripts/docker-setup.sh >&2 && scripts/kube-setup.sh --node >/dev/null
	$(GO) build -o bin/kubeup ./internal/testutil/kubenode/kubeup
	@mkdir -p .sandgate/kube && rm -f .sandgate/kube/pid && \
	  { setsid nohup bin/kubeup -state .sandgate/kube >.sandgate/kube/log 2>&1 </dev/null & pid=$$!; } && \
	  for i in $$(seq 1 600); do \
	    [ -s .sandgate/kube/pid ] && { echo "cluster up (log: .sandgate/kube/log):"; cat .sandgate/kube/gateway.yaml; exit 0; }; \
	    kill -0 $$pid 2>/dev/null || { tail -20 .sandgate/kube/log; exit 1; }; sleep 0.5; \
	  done; echo "the cluster was not up within 5 minutes: see .sandgate/kube/log"; exit 1

kube-down:
	@if [ -s .sandgate/kube/pid ]; then pid=$$(cat .sandgate/kube/pid); kill -TERM $$pid; \
	  while kill -0 $$pid 2>/dev/null; do sleep 0.5; done; tail -n 2 .sandgate/kube/log; \
	else echo "no cluster to stop (.sandgate/kube/pid)"; fi

.PHONY: bench
## bench: end-to-end benchmarks (real gateway, throwaway Postgres, local + docker providers);
## prints a table and writes bench/results/latest.json. See docs/benchmarks.md.
bench:
	nice -n 10 $(GO) run ./bench -out bench/results/latest.json
