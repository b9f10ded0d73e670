"""What a run is told: frozen, validated settings, checked when loaded and before anything starts.

`run.py` holds the run (`RunConfig`, the presets `demo`, `tiny`, `paper-qwen3-*`, `load_run_config`), and each
part's settings sit in a module of its own: `selfplay.py` (designer, hints, rollouts, memory, corpus, reward,
audit), `learner.py` (optimizer, loss, batching), `gates.py`, `sandbox.py`, `warmstart.py`. `overrides.py`
applies `key=value` overrides by the dataclasses' types; `recipe.py` writes docs/recipe.md from
`recipe_facts.py` (the reference's flags against our presets). Nothing here imports JAX, a sandbox or the
gates: a bad value is one `ConfigError` line before the model loads.
"""

from spade_jax.config.overrides import ConfigError
from spade_jax.config.run import RUN_PRESETS, RunConfig, load_run_config

__all__ = ["RUN_PRESETS", "ConfigError", "RunConfig", "load_run_config"]
