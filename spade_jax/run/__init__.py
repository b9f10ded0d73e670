"""The composition root and the step: builds a run's live parts and drives the cycle.

- `parts.py`: `build(cfg, run_dir) -> Parts` (model, tokenizer, sampler, sandbox pool, learner, self-play);
- `loop.py`: `run(cfg, run_dir, resume=...)`, the whole job, one step after another;
- `learn.py`: a step's learner half (advantages, packing, one learner step);
- `resume.py`: checkpoints of the whole run state and exact resume; `warmstart.py`: the supervised start;
- `progress.py`: progress lines with seconds and compile seconds per phase.
Import the module you need (`from spade_jax.run.loop import run`); this package imports nothing on its own.
"""
