"""Self-play: grounding corpus, environment memory, designer, hints, batched agent rollouts, regret, batches.

Joins `sampling` (the model's generations) and `envs` (sandboxed environments); `run/loop.py` joins this with `rl`.
Submodules are imported on use so that, e.g., the corpus or the memory load without JAX.
"""
