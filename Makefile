# Session Core — the two set-up commands are `make run` and `make test`.
# Everything downloaded or built is cached outside the repo in ~/.cache/session-core
# (override with SESSION_CORE_CACHE); see docs/local-stack.md.

SHELL        := /bin/bash
.SHELLFLAGS  := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON3      ?= python3
# the launcher (deploy/local/stack/); up, run and status re-run themselves with the venv's python
STACK        := $(PYTHON3) -m deploy.local.stack
VENV         := .venv
PY           := $(VENV)/bin/python
STATE_DIR    ?= $(or $(SESSION_CORE_CACHE),$(HOME)/.cache/session-core)/state/default
# extra arguments for the launcher's up/run, e.g. STACK_ARGS="--kafka-port 19092 --http-port 8081"
STACK_ARGS   ?=
# `make up SERVICES=` starts only Kafka and FerretDB
SERVICES     ?= --with-services
# one reference Runtime per harness; `make run RUNTIMES=` starts none
RUNTIMES     ?= $(if $(SERVICES),--runtimes,)
# `make run DEMO=` skips the scripted demo
DEMO         ?= $(if $(SERVICES),--demo,)
PYTEST_ARGS  ?=

# lock, lock-check and fresh-check: docs/dependencies.md
.PHONY: help venv lock lock-check fresh-check install run demo-check up down status env test test-slow test-unit test-integration test-e2e \
        faults test-chaos test-hostile lint deploy-tools deploy-check image image-smoke bench \
        bench-quick clean-state golden

help: ## show this help
	@echo "Session Core — make targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Variables: STATE_DIR=$(STATE_DIR)"
	@echo "           STACK_ARGS='$(STACK_ARGS)' SERVICES='$(SERVICES)' PYTEST_ARGS='$(PYTEST_ARGS)'"

venv: ## create/reuse the venv from requirements/dev.lock (~/.cache/session-core/venv-<hash of the lock>, linked as .venv)
	@$(STACK) venv

# The three locks (docs/dependencies.md): dev/test (the venv), the client distribution, the server
# image. `make lock` re-resolves pyproject.toml keeping every pin that still fits;
# `make lock UPGRADE=1` moves every pin to the newest allowed version.
lock: venv ## re-resolve the locks from pyproject.toml (UPGRADE=1: newest allowed versions)
	cp deploy/image/requirements.lock requirements/image.lock
	UPGRADE=$(UPGRADE) bash requirements/lock.sh requirements
	mv requirements/image.lock deploy/image/requirements.lock

lock-check: venv ## fail when pyproject.toml and the locks disagree (re-resolves into a temp dir and diffs; CI)
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	cp requirements/dev.lock requirements/client.lock "$$d"/; \
	cp deploy/image/requirements.lock "$$d"/image.lock; \
	bash requirements/lock.sh "$$d"; \
	diff -u requirements/dev.lock "$$d"/dev.lock && \
	diff -u requirements/client.lock "$$d"/client.lock && \
	diff -u deploy/image/requirements.lock "$$d"/image.lock \
	|| { echo "lock-check: pyproject.toml and the locks disagree: run 'make lock' and commit" >&2; exit 1; }; \
	echo "lock-check: the three locks match pyproject.toml"

fresh-check: ## a venv built from the lock alone in an empty temporary cache (no pip cache), then the unit tests in it (CI)
	@d=$$(mktemp -d "$${TMPDIR:-/tmp}/session-core-fresh.XXXXXX"); trap 'rm -rf "$$d"' EXIT; \
	SESSION_CORE_CACHE="$$d" PIP_NO_CACHE_DIR=1 $(STACK) venv --no-link; \
	"$$d"/venv-*/bin/python -m pytest tests/unit -q -p no:cacheprovider $(PYTEST_ARGS)

install: venv ## venv + Kafka jars (Maven Central) + FerretDB build (Go module proxy), all cached
	@$(STACK) install

run: install ## start Kafka, FerretDB, the four services and reference Runtimes in the foreground, play the demo; Ctrl-C stops all
	@$(STACK) run $(SERVICES) $(RUNTIMES) $(DEMO) --state-dir $(STATE_DIR) $(STACK_ARGS)

demo-check: install ## make run's demo on a private stack (free ports, temp state), then stop; fails unless every step of the demo held (CI)
	@d=$$(mktemp -d "$${TMPDIR:-/tmp}/session-core-demo.XXXXXX"); \
	ports=$$($(PY) -c 'from deploy.local.stack import free_port; print(free_port(), free_port(), free_port())'); \
	set -- $$ports; \
	$(STACK) run --with-services --runtimes --demo --exit-after-demo --state-dir "$$d" \
	  --kafka-port $$1 --mongo-port $$2 --http-port $$3; rc=$$?; \
	$(STACK) down --state-dir "$$d" >/dev/null 2>&1; rm -rf "$$d"; exit $$rc

up: install ## the same in the background (no demo); waits until everything is ready
	@$(STACK) up $(SERVICES) $(RUNTIMES) --state-dir $(STATE_DIR) $(STACK_ARGS)

down: ## stop everything `make up` started (SIGTERM, then SIGKILL; no orphans)
	@$(STACK) down --state-dir $(STATE_DIR)

status: ## what runs from the state dir, and whether it is ready
	@$(STACK) status --state-dir $(STATE_DIR) $(STACK_ARGS)

env: ## print KAFKA_BOOTSTRAP_SERVERS / MONGODB_URI for the running stack
	@$(STACK) env --state-dir $(STATE_DIR) $(STACK_ARGS)

# pytest exits 5 when it collected no test; make treats any non-zero exit as failure, and no
# target here masks it, so "no tests" fails the build.
EVERYDAY     := not slow and not faults and not chaos and not hostile
# make test's workers (pytest-xdist), sharing the one stack the controller starts
# (tests/conftest.py). 3 by default, CI too: most tests wait on Kafka, the store or a timer
# (user + sys was ~1.15 x wall with 2 workers on the 2-core machine), so a third worker fills
# the waits (docs/local-stack.md); 0 runs serially. The tests marked `timing` (they bound wall
# time) run afterwards, alone.
TEST_WORKERS ?= 3
XDIST        := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup)
test: install deploy-tools ## unit + integration + e2e, the everyday command (one private stack on free ports; TEST_WORKERS=N for N parallel workers; Hypothesis at its everyday budget)
	$(PY) -m pytest $(XDIST) -m "$(EVERYDAY) and not timing" $(PYTEST_ARGS)
	$(PY) -m pytest -p no:xdist -m "$(EVERYDAY) and timing" $(PYTEST_ARGS)

test-slow: install deploy-tools ## what make test leaves out: the slow cases (-m slow) and every Hypothesis test again at full budget (CI)
	SESSION_CORE_TEST_BUDGET=full $(PY) -m pytest -m "(slow or deep) and not faults and not chaos and not hostile" $(PYTEST_ARGS)

test-unit: venv ## unit tests only (no infrastructure)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install ## integration tests only (real Kafka + store)
	$(PY) -m pytest tests/integration -m "$(EVERYDAY)" $(PYTEST_ARGS)

test-e2e: install ## end-to-end tests only
	$(PY) -m pytest tests/e2e -m "$(EVERYDAY)" $(PYTEST_ARGS)

golden: install ## re-record tests/data/native/{codex,claude_code} with the real binaries against the scripted model server, then run the golden unit tests on them
	$(PY) -m tests.golden.record_codex
	$(PY) -m tests.golden.record_claude
	$(PY) -m pytest tests/unit/test_codex_golden.py tests/unit/test_claude_goldens.py $(PYTEST_ARGS)

faults: install ## slow fault-injection tests (pytest -m faults)
	$(PY) -m pytest -m faults $(PYTEST_ARGS)

test-chaos: install ## kill -9 / broker / store outage / rebalance under load, on a private stack (pytest -m chaos; prints the report table)
	$(PY) -m pytest tests/chaos -m chaos $(PYTEST_ARGS)

test-hostile: install ## schemathesis + hypothesis fuzzing of the HTTP API on the real stack (pytest -m hostile; prints cases / 5xx / writes on 4xx)
	$(PY) -m pytest -m hostile -s $(PYTEST_ARGS)

lint: venv ## ruff (services, shared, runtimes, scripted_model, demo, tests, bench, deploy), and mypy --strict on the packages and the launcher
	$(PY) -m ruff check services shared runtimes scripted_model demo tests bench examples \
	  session_core_client deploy
	$(PY) -m mypy --strict services shared runtimes scripted_model demo session_core_client \
	  deploy/local/stack

deploy-tools: ## build Helm (cached), which the rendered-chart tests of `make test` need
	bash deploy/helm/check.sh tools

deploy-check: venv ## check the deployment files (deploy/helm/check.sh)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/helm/check.sh

image: ## build the OCI image without Docker (mmdebstrap + buildah, deploy/image/build.sh); prints how to push it
	bash deploy/image/build.sh

image-smoke: ## start every service from the built image against Kafka + the store; readyz must answer 200
	bash deploy/image/smoke.sh

bench: install ## benchmarks: every case 3 times on fresh stacks, targets judged on the medians (python -m bench --repeat 3)
	$(PY) -m bench --repeat 3

bench-quick: install ## a smoke of every benchmark case (~1–2 min; CI runs it; figures meaningless)
	$(PY) -m bench --quick --no-csv

clean-state: ## stop the stack and delete its state dir (data and logs)
	@$(STACK) down --state-dir $(STATE_DIR)
	rm -rf -- "$(STATE_DIR)"
