"""Every random stream of a run, derived by name from the one run seed (`loop.seed`).

A stream's seed is `derive(run_seed, name, *index)`: 31 bits of SHA-256 over the run seed, the stream's name and
its indices. Two streams never share numbers by accident (no `seed * 1_000_003 + calls` arithmetic to collide),
adding a stream moves no other one, and `loop.seed=1` moves them all at once: corpus order, exemplar draws, the
designer's and the agent's sampling, hint writing, fixed-pool draws, the warm start's draws, and the reset seeds
of plays and of held-out evaluation. A config that pins a sub-seed keeps it (the paper presets pin the corpus
seed to the reference's 42). The names are listed here, so a misspelt one fails at once (ValueError).

Imports only the standard library: config modules and `envs` may use it.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["STREAMS", "derive", "episode_seed", "rng", "seed_of"]

STREAMS = (
    "agent",  # the agent's sampling, per policy call
    "corpus",  # grounding-document order (selfplay.corpus.seed when unset)
    "designer",  # the designer's sampling, per call
    "eval",  # sampling in agentic evaluation, per batch
    "heldout",  # reset seeds of held-out evaluation plays
    "hints",  # the hint writer's sampling, per step
    "host",  # a non-leading host's sampling seeds in a multi-host job, per host (infra/hosts.py)
    "memory",  # exemplar draws from the archive (selfplay.memory.seed when unset)
    "play",  # reset seeds of training plays
    "pool",  # which environments a fixed pool serves at a step
    "hinted",  # reset seeds of hinted plays drawn apart from the unhinted ones (selfplay.paired_seeds=False)
    "selfplay",  # design targets and archive fills
    "variants",  # the warm start's programmatic variants and mutation pairs
    "warmstart",  # the warm start's seed draws, reset seeds and example order
)


def derive(run_seed: int, name: str, *index: int | str) -> int:
    """The seed of stream `name` (one of STREAMS) at `index` in the run seeded `run_seed`: an int in [0, 2**31)."""
    if name not in STREAMS:
        raise ValueError(f"unknown random stream {name!r}; known: {', '.join(STREAMS)}")
    key = "|".join(str(part) for part in (int(run_seed), name, *index))
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") & 0x7FFFFFFF


def seed_of(pinned: int | None, run_seed: int, name: str) -> int:
    """A sub-config's seed: `pinned` when set, else stream `name` of the run."""
    return derive(run_seed, name) if pinned is None else int(pinned)


def rng(run_seed: int, name: str, *index: int | str) -> random.Random:
    """A `random.Random` on stream `name` at `index`."""
    return random.Random(derive(run_seed, name, *index))


def episode_seed(run_seed: int, env_id: str, step: int, k: int) -> int:
    """Reset seed of play k of an environment at a step: the hinted and the unhinted play k share it (unless
    `selfplay.paired_seeds` is off), so the hint is the only difference between the two conditions."""
    return derive(run_seed, "play", env_id, step, k)
