# Gridshift: the README's commands. `make run` = the embedded default; `make test` = the test suite.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHARED_DATA ?= $(abspath ../shared/data)
DEMO_DATA := $(if $(wildcard $(SHARED_DATA)/harmonized/DE_hourly.csv.gz),--data $(SHARED_DATA)/harmonized,)
PYTEST_ARGS ?=
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: venv runtimes lock lock-upgrade lock-check run seed test test-db lint typecheck bench-api bench-plan bench-forecast bench-dispatch bench-faults \
        bench-load bench-abuse bench-profile bench-web bench-replay bench-slurm-submit bench-retention bench-bound screenshots \
        test-connectors bench-api-faults compose-check clean

UV_VERSION := 0.13.9
UV := $(BIN)/uv
UV_SYNC := UV_PROJECT_ENVIRONMENT=$(abspath $(VENV)) $(UV) sync --locked --inexact

# The virtualenv is built from uv.lock only (the one resolution of every extra): two clones install the same
# versions. uv itself is pinned here and installed into the venv by pip; nothing else comes from pip.
$(UV):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q 'uv==$(UV_VERSION)'

LOCK_HINT := { echo "make: if uv.lock needs to be updated (pyproject.toml changed), run: make lock" >&2; exit 1; }

$(BIN)/.installed: uv.lock pyproject.toml | $(UV)
	$(UV_SYNC) --extra dev || $(LOCK_HINT)
	touch $@

venv: $(BIN)/.installed

## The cluster runtimes' SDKs (Ray, Kubernetes) from the same lock; without them their tests skip, saying why.
runtimes: venv
	$(UV_SYNC) --extra dev --extra runtimes || $(LOCK_HINT)

## uv.lock: `make lock` after editing pyproject.toml's dependencies (keeps every other pin),
## `make lock-upgrade` to move every pin to the newest allowed release, `make lock-check` (CI) to fail when
## pyproject.toml and uv.lock disagree.
lock: $(UV)
	$(UV) lock
lock-upgrade: $(UV)
	$(UV) lock --upgrade
lock-check: $(UV)
	$(UV) lock --check || $(LOCK_HINT)

seed: venv
	$(BIN)/gridshift db upgrade
	$(BIN)/gridshift demo seed $(DEMO_DATA)

## The embedded default: SQLite + SQLAlchemy broker under ./var, web on http://$(HOST):$(PORT) (waitress)
run: seed
	$(BIN)/gridshift run --host $(HOST) --port $(PORT)

## Whole suite; the database is SQLite unless GRIDSHIFT_TEST_DATABASE_URL names PostgreSQL.
test: venv
	$(BIN)/pytest -q $(PYTEST_ARGS)

## The database part of the suite once more on the SQLite default.
test-db: venv
	env -u GRIDSHIFT_TEST_DATABASE_URL -u GRIDSHIFT_TEST_BROKER_URL $(BIN)/pytest -q tests/app tests/migrations $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check app optimizer forecasting connectors bench tests
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

bench-api: venv
	$(BIN)/python bench/api_bench.py
bench-plan: venv
	$(BIN)/python bench/plan_bench.py --data $(SHARED_DATA)/harmonized --jobs 1000 --time-limit 10
	$(BIN)/python bench/plan_bench.py --data $(SHARED_DATA)/harmonized --scale 100,1000,10000 --scale-limits 10,10,60
	$(BIN)/python bench/plan_bench.py --data $(SHARED_DATA)/harmonized --jobs 1000 --time-limit 10 \
	  --seeds 0,1,2,3,4,5 --policies gridshift
bench-replay: venv
	$(BIN)/python bench/plan_bench.py --data $(SHARED_DATA)/harmonized --start 2022-01-01 --replay-days 365 \
	  --jobs 200 --time-limit 3 --workers 1 --replay-workers $$(nproc) --forecast naive --json
bench-retention: venv
	$(BIN)/python bench/retention_bench.py --json
bench-bound: venv
	$(BIN)/python bench/plan_bound_probe.py --data $(SHARED_DATA)/harmonized --time-limit 20 --packing-time 60 --json
bench-forecast: venv
	$(BIN)/python bench/forecast_bench.py --workers 2 --json
bench-dispatch: venv
	$(BIN)/python bench/dispatch_bench.py
bench-faults: venv
	$(BIN)/python bench/faults.py
bench-load: venv
	$(BIN)/python bench/load_bench.py --json
bench-abuse: venv
	$(BIN)/python bench/abuse_bench.py --json
bench-api-faults: venv
	$(BIN)/python bench/api_faults.py --json
bench-profile: venv
	$(BIN)/python bench/profile_bench.py --json
bench-web: venv
	$(BIN)/python bench/web_bench.py --json
bench-slurm-submit: venv
	$(BIN)/python tests/runtimes/slurm_submit_rate.py --jobs 100 --json
screenshots: venv
	$(BIN)/python -m tests.web.make_screenshots --out var/shots $(DEMO_DATA)
test-connectors: venv
	$(BIN)/pytest -q tests/connectors $(PYTEST_ARGS)

## The compose file is valid with .env (cp .env.example .env), or with .env.example's placeholders on a clean clone.
COMPOSE_ENV := $(if $(wildcard .env),.env,.env.example)
compose-check:
	docker-compose --env-file $(COMPOSE_ENV) config -q

clean:
	rm -rf var .pytest_cache .ruff_cache .mypy_cache
