"""What runs inside the sandbox: the worker that serves sessions (`worker.py`), the processes it makes
(`procs.py`), one episode's side of the protocol (`episode.py`) and cleanup after a session (`cleanup.py`).

Standard library only, and nothing of spade_jax outside this folder but the environment contract that
environment code itself imports (`spade_jax.envs.base`). `tests/test_layering.py` checks it from the AST and by
running the worker's imports in a bare interpreter (`python -I -S`).
"""
