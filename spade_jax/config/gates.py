"""The gates' settings: episode counts and limits (`GateConfig`), the static gate's allow-lists and size bounds
(`StaticConfig`), and the novelty check's similarity thresholds (`NoveltyConfig`). Plain frozen dataclasses,
checked when built; no sandbox, no JAX: a run config loads them before anything starts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from spade_jax.envs.contract import ALLOWED_IMPORTS, ALLOWED_OWN_MODULES

__all__ = ["GateConfig", "NoveltyConfig", "StaticConfig"]


@dataclass(frozen=True)
class StaticConfig:
    """Limits and allow-lists of the static gate."""

    allowed_imports: tuple[str, ...] = ALLOWED_IMPORTS
    allowed_own_modules: tuple[str, ...] = ALLOWED_OWN_MODULES
    max_chars: int = 64_000
    max_lines: int = 1_500
    max_nodes: int = 40_000
    max_depth: int = 80
    ban_print: bool = True  # the contract forbids print-based I/O (outside `if __name__ == "__main__":`)


@dataclass(frozen=True)
class NoveltyConfig:
    """Shingle sizes and the similarity at which a program counts as a duplicate."""

    structure_k: int = 12
    text_k: int = 8
    max_structure_sim: float = 0.70
    max_text_sim: float = 0.70
    max_param_variants: int = 0  # 0: a copy with other constants is a duplicate; N: up to N per family


@dataclass(frozen=True)
class GateConfig:
    """Episode counts and limits of the gates; defaults keep one validation at ~1-3 s in gVisor."""

    max_turns: int = 25
    # The reset seeds of gate episodes derive from this key (`seed`); a run passes a secret of its own, so that an
    # environment cannot tell a gate episode from a training one by its seed and behave only on the gates.
    seed_key: str = "spade-gates"
    determinism_episodes: int = 2
    determinism_steps: int = 12
    random_episodes: int = 20
    generic_episodes: int = 8  # extra generic-policy episodes when the env has its own random_action
    max_random_win_rate: float = 0.15
    reference_episodes: int = 2  # reported in details only (reference_action is optional)
    hint_max_words: int = 100
    hint_max_chars: int = 800
    max_obs_chars: int = 20_000
    time_budget_s: float = 60.0  # dynamic gates together; a slower environment is rejected
    extract: bool = True  # run the completion parser first (bare source passes through unchanged)
    # False: only the checks the reference makes (extract, static, load, reset, step probes); the determinism,
    # termination, random-play, hint and novelty gates are skipped. A self-play run sets it from selfplay.signal.
    strict: bool = True
    static: StaticConfig = field(default_factory=StaticConfig)
    novelty: NoveltyConfig = field(default_factory=NoveltyConfig)

    def __post_init__(self) -> None:
        counts = ("max_turns", "determinism_episodes", "determinism_steps", "random_episodes", "hint_max_words",
                  "hint_max_chars", "max_obs_chars")  # fmt: skip
        for name in counts:
            if getattr(self, name) < 1:
                raise ValueError(f"gates.{name}={getattr(self, name)}; expected >= 1")
        for name in ("generic_episodes", "reference_episodes"):
            if getattr(self, name) < 0:
                raise ValueError(f"gates.{name}={getattr(self, name)}; expected >= 0")
        if not 0.0 <= self.max_random_win_rate <= 1.0:
            raise ValueError(f"gates.max_random_win_rate={self.max_random_win_rate}; expected a rate in [0, 1]")
        if not self.time_budget_s >= 0:
            raise ValueError(f"gates.time_budget_s={self.time_budget_s}; expected >= 0 seconds")

    def seed(self, purpose: str, i: int = 0) -> int:
        """Reset seed of gate episode i of a purpose: 31 bits of a keyed hash, like the training seeds."""
        digest = hashlib.sha256(f"{self.seed_key}|{purpose}|{i}".encode()).digest()
        return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF

    @property
    def probe_seed(self) -> int:
        """The seed of the reset, step and hint probes."""
        return self.seed("probe")
