"""Every number a run config holds, with the range where it means something, checked in one place.

`RANGES` declares, per config class and field, the values a field may take (`Range`: a lower and an upper bound,
each open or closed; `None` allowed or not). `check_ranges(cfg)` walks a config and its sections, and refuses the
first value out of its range, of the wrong type (text or a bool where a number belongs, a float where an integer
does) or not finite (NaN, inf) with one line naming the key by its dotted path:
`selfplay.rollout.temperature=-0.5; expected >= 0`. `RunConfig` calls it whenever it is built or changed (a
preset, an override, a saved config.json), so a bad value is refused when the config loads, before a run
directory is made or a model is read.

A test (tests/test_config_ranges.py) walks the config tree and fails on a numeric field without a range here, so a
new setting cannot slip through unchecked. Checks that relate two fields (plateau_lo <= plateau_hi, ...) stay in
the sections' own `__post_init__`. No JAX, no sandbox: this runs before either starts.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from spade_jax.config.overrides import ConfigError

__all__ = ["RANGES", "Range", "at_least", "between", "check_ranges", "fraction", "numeric_fields", "positive"]


@dataclass(frozen=True)
class Range:
    """The values a number may take: `lo`/`hi` (None: unbounded), each bound open or closed; `none_ok` when the
    field may be None (its meaning is given in `note`, e.g. "none: derived from grad_accum_steps")."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    none_ok: bool = False
    note: str = ""

    def holds(self, x: float) -> bool:
        if self.lo is not None and not (x > self.lo if self.lo_open else x >= self.lo):
            return False
        return self.hi is None or (x < self.hi if self.hi_open else x <= self.hi)

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            text = f"{'(' if self.lo_open else '['}{_n(self.lo)}, {_n(self.hi)}{')' if self.hi_open else ']'}"
            text = f"a value in {text}"
        elif self.lo is not None:
            text = f"{'>' if self.lo_open else '>='} {_n(self.lo)}"
        elif self.hi is not None:
            text = f"{'<' if self.hi_open else '<='} {_n(self.hi)}"
        else:
            text = "a finite number"
        if self.none_ok:
            text += " or none"
        return f"{text} ({self.note})" if self.note else text


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def at_least(lo: float, note: str = "", none_ok: bool = False) -> Range:
    return Range(lo=lo, note=note, none_ok=none_ok)


def positive(note: str = "") -> Range:
    return Range(lo=0, lo_open=True, note=note)


def between(lo: float, hi: float, note: str = "", *, lo_open: bool = False, hi_open: bool = False) -> Range:
    return Range(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, note=note)


def fraction(note: str = "") -> Range:
    """A share or a rate: [0, 1]."""
    return between(0, 1, note)


COUNT = at_least(1)  # how many of something the run needs at least one of
OPTIONAL = at_least(0)  # a count or budget where 0 means none / off (said in the field's comment)
TEMPERATURE = at_least(0, "0: greedy")
TOP_P = between(0, 1, lo_open=True)
TOP_K = at_least(0, "0: off")
SEED = at_least(0)
# Learning rates: 0 is allowed (the learning benchmark's control run does not move). An AdamW step moves each
# weight by up to about lr, and a language model's weights are of order 0.01-1, so above 1 a step rewrites them
# outright: a typo (1e9 for 1e-9), not a setting. (Useful values are far below: 1e-6 to 1e-4.)
LR = between(0, 1, "0: no update")
REWARD = between(-1, 1, "an episode's return is clipped to [-1, 1]")

# class name -> field -> range. Keyed by name, not class, so that this module imports none of the sections.
RANGES: dict[str, dict[str, Range]] = {
    "RunConfig": {
        "max_total_len": COUNT,
        "decode_slots": COUNT,
        "num_workers": COUNT,
        "sessions_per_worker": COUNT,
        "call_timeout_s": positive("seconds"),
    },
    "SandboxLimits": {
        "load_timeout_s": positive("seconds"),
        "memory_mb": COUNT,
        "cpu_seconds": COUNT,
        "max_processes": COUNT,
        "tmp_mb": COUNT,
        "sandbox_memory_mb": at_least(0, "0: automatic"),
        "sandbox_processes": at_least(0, "0: automatic"),
    },
    "LoopConfig": {
        "steps": at_least(0, "0 only with loop.warmstart: the warm start alone"),
        "pool_envs_per_step": COUNT,
        "eval_every": at_least(0, "0: only at the end of the run"),
        "eval_plays": at_least(0, "0: no held-out evaluation"),
        "checkpoint_every": COUNT,
        "keep_checkpoints": COUNT,
        "seed": SEED,
        "global_batch": COUNT,
    },
    "SelfPlayConfig": {
        "plays_per_condition": COUNT,
        "envs_per_step": COUNT,
        "agent_batch": at_least(0, "0: plays_per_condition unhinted plays per environment"),
        "skills_per_regen": at_least(0, "0: every skill each round"),
        "regen_interval": COUNT,
        "designer_delay": OPTIONAL,
        "designer_reward_scale": at_least(0, "0: automatic"),
        "designer_reward_scale_max": positive(),
        "seed": SEED,
    },
    "CorpusConfig": {
        "seed": at_least(0, "none: the run's corpus stream", none_ok=True),
        "max_doc_words": at_least(0, "0: no cut"),
        "max_doc_tokens": at_least(0, "0: no cut"),
        "min_doc_chars": OPTIONAL,
    },
    "MemoryConfig": {
        "capacity": COUNT,
        "n_positive": OPTIONAL,
        "n_negative": OPTIONAL,
        "positive_band": fraction(),
        "negative_low": fraction(),
        "negative_high": fraction(),
        "exemplar_max_chars": COUNT,
        "max_invalid_rows": OPTIONAL,
        "seed": at_least(0, "none: the run's memory stream", none_ok=True),
        "max_param_variants": OPTIONAL,
        "seed_spread": COUNT,
    },
    "DesignerConfig": {
        "max_new_tokens": COUNT,
        "temperature": TEMPERATURE,
        "top_p": TOP_P,
        "top_k": TOP_K,
        "max_resamples": OPTIONAL,
        "max_repairs": OPTIONAL,
        "context_len": COUNT,
        "min_doc_tokens": OPTIONAL,
        "mutation_share": fraction(),
        "place_parents": OPTIONAL,
    },
    "HintConfig": {
        "temperature": TEMPERATURE,
        "top_p": TOP_P,
        "top_k": TOP_K,
        "max_new_tokens": COUNT,
        "max_words": COUNT,
        "max_sentences": COUNT,
    },
    "RolloutConfig": {
        "max_turns": COUNT,
        "max_episode_tokens": COUNT,
        "max_new_tokens_per_turn": COUNT,
        "min_turn_tokens": COUNT,
        "temperature": TEMPERATURE,
        "top_p": TOP_P,
        "top_k": TOP_K,
        "max_consecutive_format_errors": at_least(1, "none: no limit", none_ok=True),
    },
    "RewardConfig": {
        "regret_weight": OPTIONAL,
        "plateau_weight": OPTIONAL,
        "regret_scale": positive(),
        "plateau_lo": fraction(),
        "plateau_hi": fraction(),
        "plateau_ramp": OPTIONAL,
        "lp_gamma_fast": fraction(),
        "lp_gamma_slow": fraction(),
        "min_plays_fraction": fraction(),
        "timeout_reward": REWARD,
        "violation_reward": REWARD,
    },
    "AuditConfig": {"random_plays": OPTIONAL},
    "GateConfig": {
        "max_turns": COUNT,
        "determinism_episodes": COUNT,
        "determinism_steps": COUNT,
        "random_episodes": COUNT,
        "generic_episodes": OPTIONAL,
        "max_random_win_rate": fraction(),
        "reference_episodes": OPTIONAL,
        "hint_max_words": COUNT,
        "hint_max_chars": COUNT,
        "max_obs_chars": COUNT,
        "time_budget_s": at_least(0, "seconds"),
    },
    "StaticConfig": {"max_chars": COUNT, "max_lines": COUNT, "max_nodes": COUNT, "max_depth": COUNT},
    "NoveltyConfig": {
        "structure_k": COUNT,
        "text_k": COUNT,
        "max_structure_sim": fraction(),
        "max_text_sim": fraction(),
        "max_param_variants": OPTIONAL,
    },
    "LearnerConfig": {
        "lr": LR,
        "warmup_steps": OPTIONAL,
        "total_steps": OPTIONAL,
        "weight_decay": OPTIONAL,
        "betas": between(0, 1, hi_open=True),
        "eps": positive(),
        "grad_clip": at_least(0, "0: no clipping"),
        "micro_batch_size": at_least(1, "none: the batch / grad_accum_steps", none_ok=True),
        "grad_accum_steps": COUNT,
        "logits_chunk": at_least(0, "0: no chunking"),
        "vocab_chunk": at_least(0, "0: the whole vocabulary"),
        "attn_query_chunk": at_least(0, "0: no chunking"),
        "clip_low": between(0, 1, hi_open=True),
        "clip_high": OPTIONAL,
        "is_cap": positive(),
        "kl_coef": OPTIONAL,
        "kl_clip": at_least(0, "0: no cap"),
        "tis_temperature": at_least(0, "0: the raw model's log-probs"),
        "entropy_coef": OPTIONAL,
        "length_buckets": COUNT,
    },
    "WarmStartConfig": {
        "epochs": COUNT,
        "lr": LR,
        "agent_episodes_per_seed": OPTIONAL,
        "designer_examples_per_seed": OPTIONAL,
        "designer_seeds": at_least(0, "0: all"),
        "designer_variants_per_seed": OPTIONAL,
        "designer_mutations_per_seed": OPTIONAL,
        "batch_size": COUNT,
        "probe_designs": OPTIONAL,
    },
}


def _number_kind(typ: Any) -> type | None:
    """int or float for a numeric field type (also inside `X | None` and `tuple[X, ...]`), else None."""
    if typ in (int, float):
        return typ
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType, tuple):
        kinds = {_number_kind(a) for a in typing.get_args(typ) if a not in (type(None), Ellipsis)}
        kinds.discard(None)
        return float if float in kinds else (int if kinds else None)
    return None


def numeric_fields(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted path, class name, field name) of every numeric field of `cls` and its sections."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            out += numeric_fields(typ, f"{prefix}{f.name}.")
        elif _number_kind(typ) is not None:
            out.append((prefix + f.name, cls.__name__, f.name))
    return out


def _bad(path: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{path}={value!r}; expected {expected}")


def _check_number(path: str, value: Any, kind: type, rng: Range) -> None:
    if value is None:
        if not rng.none_ok:
            raise _bad(path, value, f"{'an integer' if kind is int else 'a number'} {rng}")
        return
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or (kind is int and not isinstance(value, int)):
        raise _bad(path, value, f"{'an integer' if kind is int else 'a number'} {rng}")
    if not math.isfinite(value) or not rng.holds(value):
        raise _bad(path, value, str(rng))


def check_ranges(cfg: Any, prefix: str = "") -> None:
    """Refuses (ConfigError, one line) the first numeric field of `cfg` or its sections that is out of its
    declared range, of the wrong type or not finite; a numeric field with no declared range is an error too."""
    hints = typing.get_type_hints(type(cfg))
    declared = RANGES.get(type(cfg).__name__, {})
    for f in dataclasses.fields(cfg):
        value, typ, path = getattr(cfg, f.name), hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(value):
            check_ranges(value, path + ".")
            continue
        kind = _number_kind(typ)
        if kind is None:
            continue
        rng = declared.get(f.name)
        if rng is None:
            raise ConfigError(f"{path}: no range declared for this number (spade_jax/config/ranges.py)")
        if typing.get_origin(typ) is tuple or typ is tuple:
            each = f"a list of {'integers' if kind is int else 'numbers'}, each {rng}"
            if not isinstance(value, tuple | list):
                raise _bad(path, value, each)
            try:
                for item in value:
                    _check_number(path, item, kind, rng)
            except ConfigError:
                raise _bad(path, tuple(value), each) from None
        else:
            _check_number(path, value, kind, rng)
