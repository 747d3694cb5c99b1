# chess-rl: the two commands are `make demo` and `make test`. Both set everything up on a fresh
# machine (.venv, the project, Stockfish) and are safe to re-run.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Re-install only when the dependency list or the pins change.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt 2>/dev/null | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=
# torch's OpenMP threads sleep when idle instead of spinning (pipelines/__init__.py): every test
# process and Ray worker shares 2 cores with others, where spinning threads ran 10x slower.
export OMP_WAIT_POLICY ?= PASSIVE
# The Ray tiers in TEST_WORKERS test processes side by side (pytest-xdist), each test file whole in
# one of them: one process leaves a third of 2 CPUs idle waiting on Ray, Train workers and
# Stockfish. 1,531 s against 2,121 s one at a time (stop 90 against stop 89, fresh clones). At stop
# 65 one run of three hung (a worker stuck inside Ray); pytest-timeout now ends such a test after
# 20 minutes as a failure (pyproject.toml). TEST_WORKERS=0: one process. See tests/README.md.
TEST_WORKERS ?= 2
# A crashed test process is a failure, not a retry: xdist's loadfile would run the crashed test's
# whole file again on a fresh worker, up to 8 times (--max-worker-restart 0 ends the run instead).
XDIST := $(if $(filter-out 0,$(strip $(TEST_WORKERS))),-n $(strip $(TEST_WORKERS)) --dist loadfile --no-loadscope-reorder --max-worker-restart 0)
# The unit tier has no Ray (its marker's promise): `make test` and `make check` run it in
# UNIT_WORKERS test processes (pytest-xdist, a file whole in each, the files with a slow test
# first: tests/conftest.py), then the Ray tiers in TEST_WORKERS processes. Each part's
# failure fails the command; both parts always run. `make check` leaves out the slow unit test.
UNIT_WORKERS ?= 2
UNIT_XDIST := $(if $(filter-out 0 1,$(strip $(UNIT_WORKERS))),-n $(strip $(UNIT_WORKERS)) --dist loadfile --no-loadscope-reorder --max-worker-restart 0)
RAY_TIERS := tests/integration tests/system
# Flags for the demo's rlaif command, e.g. DEMO_ARGS='--storage /tmp/r --set ppo.kl_coef=0.1'.
DEMO_ARGS ?=
# A GPU machine: the pinned torch from a CUDA wheel index first, e.g.
# `make venv TORCH_INDEX=https://download.pytorch.org/whl/cu128` (empty: the CPU build).
TORCH_INDEX ?=

.PHONY: help venv stockfish demo test check lint unit integration system bench gpu-check clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(if $(TORCH_INDEX),$(PIP) install --quiet "$$(grep '^torch==' constraints.txt)" --index-url $(TORCH_INDEX))
	$(PIP) install --quiet -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP) ## create .venv and install the project (with dev extras) against constraints.txt

stockfish: ## install Stockfish if it is missing (apt-get), or say how to point STOCKFISH_PATH at one
	@bash scripts/ensure-stockfish.sh

demo: venv stockfish ## the whole rlaif graph on the embedded local Ray (configs/demo.yaml: tiny models, ~9 min on 2 CPUs)
	$(PY) -m pipelines.rlaif --config demo $(DEMO_ARGS)
	@echo "Browse the MLflow runs: $(VENV)/bin/mlflow ui --backend-store-uri $(if $(findstring --storage,$(DEMO_ARGS)),<the sqlite URI on the 'mlflow:' lines above>,sqlite:///$(CURDIR)/runs/mlflow.db)"

lint: venv ## ruff: the lint rules, and the formatter's layout (no opt-outs: `ruff format .` fixes it)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: venv stockfish lint ## lint, then every test (unit, integration, system; what CI runs)
	$(VENV)/bin/pytest $(UNIT_XDIST) tests/unit $(PYTEST_ARGS); unit=$$?; \
	$(VENV)/bin/pytest $(XDIST) $(RAY_TIERS) $(PYTEST_ARGS); rest=$$?; \
	exit $$(( unit > rest ? unit : rest ))

check: venv stockfish lint ## the inner loop: lint, unit and the fast integration tests (no slow, no system)
	$(VENV)/bin/pytest $(UNIT_XDIST) -m "not slow" tests/unit $(PYTEST_ARGS); unit=$$?; \
	$(VENV)/bin/pytest $(XDIST) -m "not slow and not system" $(RAY_TIERS) $(PYTEST_ARGS); rest=$$?; \
	exit $$(( unit > rest ? unit : rest ))

unit: venv ## unit tests only (no Ray, milliseconds each)
	$(VENV)/bin/pytest $(UNIT_XDIST) tests/unit $(PYTEST_ARGS)

integration: venv stockfish ## integration tests (local Ray, real Stockfish)
	$(VENV)/bin/pytest $(XDIST) tests/integration $(PYTEST_ARGS)

system: venv stockfish ## system tests (ray start + job submit, mlflow server, moto S3)
	$(VENV)/bin/pytest $(XDIST) tests/system $(PYTEST_ARGS)

bench: venv stockfish ## benchmarks (ratios against a baseline measured in the same run)
	$(PY) bench/prepare.py
	$(PY) bench/engine_pool.py
	$(PY) bench/annotate.py
	$(PY) bench/sft.py
	$(PY) bench/mcts.py
	$(PY) bench/preferences.py
	$(PY) bench/reward_server.py
	$(PY) bench/judge_speed.py
	$(PY) bench/arena_parallel.py

gpu-check: venv stockfish ## every phase a few steps on this machine's GPU: where each ran and how fast (scripts/gpu_check.sh)
	bash scripts/gpu_check.sh

clean: ## remove runs/ and caches (keeps .venv)
	rm -rf runs .pytest_cache .ruff_cache
