# quota: make help lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
export PATH := /usr/local/go/bin:$(PATH)

GO ?= go
PKGS := ./...

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: run
run: ## run one regional limiter on embedded defaults (in-process store, embedded NATS) on :8080; Ctrl-C stops it at once
	$(GO) build -o bin/regional-limiter ./cmd/regional-limiter
	exec bin/regional-limiter --shutdown-delay 0s

.PHONY: run-example
run-example: ## run examples/weighted-api, a Go service embedding a participant, on embedded defaults on :8083
	$(GO) run ./examples/weighted-api

.PHONY: test
test: ## vet and run every test against real Redis, NATS and Postgres
	scripts/check-test-deps.sh
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)

# The moved-date check (scripts/moved-date.sh): the tests again with this
# process's clock moved to the calendar's edges. Each date runs the whole
# suite again, so each carries several edges: a year's last seconds, a
# Sunday's (a month's and a year's end, an ISO week's start on Monday 1
# January); 29 February's last seconds, a Sunday's too (a leap day, a
# month's end, a week's start); the daylight saving change in a plan's zone
# (New York). -short: tests on Redis take their time from Redis, whose clock
# a test cannot move. Left out: ledger/reconcile,
# whose closer and views judge windows by Postgres' now(), which a moved Go
# clock does not move; and the packages with no calendar in them (gossip,
# membership, NATS and its configs, tokens, test servers, dashboards, the
# load generator, the harness, the deploy). Each package's test binary is
# built once and run at every date; -timeout bounds one date's run, and
# (plus a minute) all of one package's runs.
DATES ?= 2028-12-31T23:59:58Z 2032-02-29T23:59:58Z 2027-03-14T06:59:58Z
NO_CALENDAR := /test/multiregion /deploy/ /ledger/reconcile$$ /gossip$$ /membership$$ /natsembed$$ /natsrole$$ \
	/internal/natsconf$$ /internal/natsname$$ /internal/testserver$$ /internal/scratch$$ /bearer$$ /cmd/loadtest$$
DATE_PKGS = $(shell $(GO) list ./... | grep -v $(foreach p,$(NO_CALENDAR),-e '$(p)'))

.PHONY: test-dates
test-dates: ## the tests with the clock moved to the calendar's edges (DATES), -short
	scripts/moved-date.sh "$(DATES)" -short -timeout 20m $(DATE_PKGS)

.PHONY: rules-test
rules-test: ## check the alert rules and run their unit tests with promtool (Debian package prometheus)
	@command -v promtool >/dev/null || { echo "promtool is missing: install the Debian package prometheus (apt-get install -y prometheus)" >&2; exit 1; }
	promtool check rules deploy/prometheus/quota-rules.yaml
	cd deploy/prometheus && promtool test rules quota-rules.test.yaml

.PHONY: bench
bench: ## run the Go benchmarks: hot path, store calls, state size, slow path, ledger ingestion, the HTTP check beside a bare handler, a Stripe pass
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1s ./region/...
	$(GO) test -run '^$$' -bench Ingest -benchtime 200000x ./ledger/reconcile/
	$(GO) test -run '^$$' -bench 'BenchmarkCheck' -benchtime 20000x ./cmd/regional-limiter/
	$(GO) test -run '^$$' -bench 'BenchmarkStripePass' -benchtime 2x ./ledger/sink/

BILLING_KEYS ?= 100000
BILLING_DAYS ?= 30
.PHONY: bench-billing
bench-billing: ## seed BILLING_KEYS keys × BILLING_DAYS days of hourly rows in a private Postgres, time an idle and a 1 %-changed continuous sink pass
	QUOTA_BILLING_SCALE=1 QUOTA_BILLING_KEYS=$(BILLING_KEYS) QUOTA_BILLING_DAYS=$(BILLING_DAYS) \
		$(GO) test -count=1 -timeout 120m -run '^TestBillingScale$$' -v ./ledger/sink/

.PHONY: bench-budget
bench-budget: ## fail when a check allocates over 1.1x the bare net/http handler's bytes or allocations (about 40 s)
	QUOTA_ALLOC_BUDGET=1 $(GO) test -count=1 -run '^TestCheckAllocationBudget$$' -v ./cmd/regional-limiter/

LOADTEST_ADDR ?= 127.0.0.1:18080
LOADTEST_ARGS ?= -duration 5s -half
.PHONY: loadtest
loadtest: ## start a daemon in a temp dir and load it over loopback (LIMITER_ARGS="--redis redis://…")
	$(GO) build -o bin/regional-limiter ./cmd/regional-limiter
	$(GO) build -o bin/loadtest ./cmd/loadtest
	dir=$$(mktemp -d); \
	QUOTA_ADMIN_TOKEN=loadtest bin/regional-limiter --listen $(LOADTEST_ADDR) --data-dir $$dir --log-level warn $(LIMITER_ARGS) & pid=$$!; \
	trap 'kill $$pid; wait $$pid || true; rm -rf $$dir' EXIT; \
	bin/loadtest -url http://$(LOADTEST_ADDR) -admin-token loadtest -server-pid $$pid $(LOADTEST_ARGS)

.PHONY: fuzz
fuzz: ## fuzz the wire formats and HTTP input for 20 s each
	$(GO) test -run '^$$' -fuzz FuzzDecodeDigest -fuzztime 20s ./gossip/
	$(GO) test -run '^$$' -fuzz FuzzShares -fuzztime 20s ./partition/
	$(GO) test -run '^$$' -fuzz FuzzHTTP -fuzztime 20s ./internal/limitapi/
	$(GO) test -run '^$$' -fuzz FuzzDecodeCheck -fuzztime 20s ./internal/limitapi/
	$(GO) test -run '^$$' -fuzz FuzzWriteError -fuzztime 20s ./httplimit/
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 20s ./ledger/
	$(GO) test -run '^$$' -fuzz FuzzDecodeBatch -fuzztime 20s ./ledger/
	$(GO) test -run '^$$' -fuzz FuzzParseQuery -fuzztime 20s ./ledger/billing/
	$(GO) test -run '^$$' -fuzz FuzzBatch -fuzztime 20s ./ledger/reconcile/
	$(GO) test -run '^$$' -fuzz FuzzBillingAuth -fuzztime 20s ./ledger/billing/

# Reports the harness and the soak write: generated, untracked (.gitignore).
REPORT_DIR ?= out
.PHONY: multiregion
multiregion: ## full multi-region harness (90 s runs, 30 s faults); writes out/multiregion/report.md and its plots
	QUOTA_MULTIREGION=full QUOTA_MULTIREGION_REPORT=$(REPORT_DIR)/multiregion/report.md $(GO) test -count=1 -timeout 60m -v ./test/multiregion/

.PHONY: multiregion-short
multiregion-short: ## the harness's CI form (about 9 minutes, -v: every figure); QUOTA_MULTIREGION_REPORT=path also writes a report
	QUOTA_MULTIREGION=short $(GO) test -count=1 -timeout 15m -v ./test/multiregion/

.PHONY: fleet
fleet: ## three regions on this machine (Redis, NATS, two limiters each; Postgres, reconciler); Ctrl-C stops all
	$(GO) build -o bin/ ./cmd/fleet ./cmd/regional-limiter ./cmd/reconciler
	bin/fleet -bin bin

.PHONY: fleet-test
fleet-test: ## start the fleet as make fleet does, check each region and the ledger, Ctrl-C it, assert nothing is left
	$(GO) test -count=1 -run '^TestFleet$$' -v ./cmd/fleet/

.PHONY: migrate
migrate: ## apply the ledger migrations to QUOTA_POSTGRES
	$(GO) run ./cmd/reconciler migrate

.PHONY: tf-validate
tf-validate: ## validate the Terraform deploy offline (fmt, validate, terraform test with mocks)
	bash deploy/terraform/validate.sh

.PHONY: tf-apply-test
tf-apply-test: ## apply the 3-region deploy to a loopback Kubernetes control plane (fake kubelets) and assert on it; after tf-validate
	bash deploy/terraform/applytest/apply-test.sh

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
.PHONY: lint
lint: ## gofmt, go vet, staticcheck (pinned; go run fetches it through the module proxy) and docs-check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	scripts/docs-budget.sh

.PHONY: docs-check
docs-check: ## the docs budget: Markdown words per Go code line <= 1.0, no .md over 20 KB, links and cited design decisions resolve
	scripts/docs-budget.sh

.PHONY: tidy
tidy: ## check that go.mod and go.sum are tidy
	cp go.mod /tmp/quota-go.mod.bak; cp go.sum /tmp/quota-go.sum.bak
	$(GO) mod tidy
	if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; cp /tmp/quota-go.mod.bak go.mod; cp /tmp/quota-go.sum.bak go.sum; echo "go.mod/go.sum are not tidy"; exit 1; fi

.PHONY: build
build: ## build both daemons into bin/
	CGO_ENABLED=0 $(GO) build -o bin/ ./cmd/regional-limiter ./cmd/reconciler

.PHONY: soak
soak: ## 10-minute soak: one limiter with Redis and the reconciler at 100,000 keys; writes out/soak.md
	mkdir -p $(REPORT_DIR)
	QUOTA_SOAK=$${QUOTA_SOAK:-10m} QUOTA_SOAK_REPORT=$${QUOTA_SOAK_REPORT:-$(CURDIR)/$(REPORT_DIR)/soak.md} $(GO) test -count=1 -timeout 40m -v -run '^TestSoak$$' ./test/multiregion/
