"""The reference's launch-script hyper-parameters against our paper presets: `python -m spade_jax.config.recipe`
writes docs/recipe.md (tests/test_recipe.py checks it is current and that every row we claim to match does).

`FACTS` is hand-entered from the reference (github spade-rl/spade): `cmd/games/train_spade_{4b,8b,30b}.sh`,
`cmd/tool_use/_train_spade_blend.sh` (the 8B/30B tool-use entry points) and `cmd/tool_use/train_spade_4b.sh`,
with the defaults of `spade/slime/arguments.py` (and slime's) where a script leaves a flag unset. Our values are
read from the preset objects when the table is generated.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

from spade_jax.config.run import PAPER_GAME_SKILLS, load_run_config
from spade_jax.config.selfplay import REFERENCE_OBSERVATION_TEMPLATE

# Reference scripts (columns) and the preset that follows each; None = shown for information only.
SCRIPTS: dict[str, tuple[str, str | None]] = {
    "g4b": ("cmd/games/train_spade_4b.sh", "paper-qwen3-4b"),
    "g8b": ("cmd/games/train_spade_8b.sh", "paper-qwen3-8b"),
    "g30b": ("cmd/games/train_spade_30b.sh", "paper-qwen3-30b-a3b"),
    "tool": ("cmd/tool_use/_train_spade_blend.sh (30b)", "paper-qwen3-30b-a3b-tool"),
    "tool4b": ("cmd/tool_use/train_spade_4b.sh", None),
}
# Presets that follow a script without being its column's preset: (script, keys not compared).
EXTRA_PRESETS: dict[str, tuple[str, tuple[str, ...]]] = {"paper-qwen3-4b-tool": ("tool", ("model",))}

_TOOL_SKILLS = ("API_Orchestration", "Data_Retrieval", "State_Modification", "Error_Recovery", "Tool_Selection",
                "Multi-Step_Workflows")  # fmt: skip


class Fact(NamedTuple):
    """flag: the reference's; ref: value per script key ("*" = every script); key: ours (dotted, "" = none);
    why: set when we differ on purpose (then the row is not checked)."""

    flag: str
    ref: dict[str, Any]
    key: str
    why: str = ""


def _v(all_: Any = None, **per: Any) -> dict[str, Any]:
    return {"*": all_, **per}


FACTS: tuple[Fact, ...] = (
    Fact(
        "--hf-checkpoint",
        _v(
            None,
            g4b="qwen3-4b-instruct-2507",
            g8b="qwen3-8b",
            g30b="qwen3-30b-a3b-instruct-2507",
            tool="qwen3-30b-a3b-instruct-2507",
            tool4b="qwen3-4b-instruct-2507",
        ),
        "model",
    ),  # fmt: skip
    Fact("--num-rollout", _v(400, tool4b=500), "loop.steps"),
    Fact("--spade-num-games-per-rollout / --rollout-batch-size", _v(24, tool4b=16), "selfplay.envs_per_step"),
    Fact("--spade-trajectories-per-game", _v(16), "selfplay.plays_per_condition"),
    Fact("--spade-hint-plays-per-game", _v(16, tool4b=4), "selfplay.plays_per_condition"),
    Fact("--spade-game-regeneration-interval", _v(4, tool=8, tool4b=32), "selfplay.regen_interval"),
    Fact("--spade-proposer-training-delay", _v(4, tool=8, tool4b=32), "selfplay.designer_delay"),
    Fact("--spade-skills-per-regen", _v(3, tool=0, tool4b=0), "selfplay.skills_per_regen"),
    Fact("--spade-skills (games)", _v(PAPER_GAME_SKILLS, tool=None, tool4b=None), "selfplay.skills"),
    Fact(
        "--spade-skills (tool use)",
        _v(None, tool=_TOOL_SKILLS, tool4b=_TOOL_SKILLS),
        "selfplay.skills",
        "our tool environments name a domain as their SKILL (envs/contract.py TOOL_DOMAINS)",
    ),  # fmt: skip
    Fact("--spade-game-difficulty", _v("medium"), "", "our designer prompt asks for no named difficulty level"),
    Fact("--spade-env-temperature", _v(0.6), "selfplay.designer.temperature"),
    Fact("--spade-env-top-p (default)", _v(0.95), "selfplay.designer.top_p"),
    Fact("--spade-env-top-k (default)", _v(20), "selfplay.designer.top_k"),
    Fact("--spade-env-max-tokens", _v(16384, g8b=20000), "selfplay.designer.max_new_tokens"),
    Fact("--spade-actor-temperature", _v(0.6), "selfplay.rollout.temperature"),
    Fact("--spade-actor-top-p (default)", _v(0.95), "selfplay.rollout.top_p"),
    Fact("--spade-actor-top-k (default)", _v(20), "selfplay.rollout.top_k"),
    Fact("--spade-actor-max-tokens / --rollout-max-response-len", _v(8192), "selfplay.rollout.max_new_tokens_per_turn"),
    Fact("--spade-max-context-length", _v(32768), "selfplay.rollout.max_episode_tokens"),
    Fact("--spade-max-context-length (sampler)", _v(32768), "max_total_len"),
    Fact("--spade-max-turns", _v(25), "selfplay.rollout.max_turns"),
    Fact("--spade-actor-template", _v(REFERENCE_OBSERVATION_TEMPLATE), "selfplay.rollout.observation_template"),
    Fact("parse_action (spade/core/utils/parsing.py)", _v("reference"), "selfplay.rollout.action_parsing"),
    Fact("--spade-env-enable-thinking / chat kwargs", _v(False, g8b=True), "selfplay.designer.enable_thinking"),
    Fact("--spade-actor-enable-thinking / chat kwargs", _v(False, g8b=True), "selfplay.rollout.enable_thinking"),
    Fact(
        "hint chat kwargs (global --apply-chat-template-kwargs)", _v(False, g8b=True), "selfplay.hints.enable_thinking"
    ),  # fmt: skip
    Fact("--spade-hint-mode", _v("model"), "selfplay.hints.source"),
    Fact("--spade-hint-temperature", _v(0.3), "selfplay.hints.temperature"),
    Fact("hint top_p (generate_async default)", _v(0.9), "selfplay.hints.top_p"),
    Fact("hint top_k (slime --rollout-top-k default -1 = off)", _v(0), "selfplay.hints.top_k"),
    Fact("--spade-hint-max-tokens", _v(4096, tool=2048, tool4b=512), "selfplay.hints.max_new_tokens"),
    Fact("--spade-env-reward-variant", _v("blend", tool4b="regret"), "selfplay.reward.kind"),
    Fact("--spade-plateau-weight", _v(0.6, tool4b=None), "selfplay.reward.plateau_weight"),
    Fact("--spade-regret-weight", _v(0.4, tool4b=None), "selfplay.reward.regret_weight"),
    Fact("--spade-regret-scale", _v(0.15, tool4b=None), "selfplay.reward.regret_scale"),
    Fact("--spade-plateau-lo", _v(0.4, tool4b=None), "selfplay.reward.plateau_lo"),
    Fact("--spade-plateau-hi", _v(0.6, tool4b=None), "selfplay.reward.plateau_hi"),
    Fact("--spade-plateau-ramp", _v(0.25, tool4b=None), "selfplay.reward.plateau_ramp"),
    Fact("--spade-gamma1", _v(0.98), "selfplay.reward.lp_gamma_fast"),
    Fact("--spade-gamma2", _v(0.85), "selfplay.reward.lp_gamma_slow"),
    Fact("--spade-corpus-max-doc-tokens (words)", _v(6000, tool=4000, tool4b=4000), "selfplay.corpus.max_doc_words"),
    Fact("--spade-corpus-seed", _v(42), "selfplay.corpus.seed"),
    Fact("--spade-env-memory-max-size", _v(200), "selfplay.memory.capacity"),
    Fact("ENV_STEP_TIMEOUT (orchestrator.py), seconds", _v(30.0), "call_timeout_s"),
    Fact("--lr", _v(1e-6), "learner.lr"),
    Fact("--lr-decay-style", _v("constant"), "learner.schedule"),
    Fact("--weight-decay", _v(0.1), "learner.weight_decay"),
    Fact("--adam-beta1 / --adam-beta2", _v((0.9, 0.98)), "learner.betas"),
    Fact("--eps-clip", _v(0.2), "learner.clip_low"),
    Fact("--eps-clip-high", _v(0.28), "learner.clip_high"),
    Fact("--kl-loss-coef (low_var_kl)", _v(0.005, g4b=0.0, g30b=0.0), "learner.kl_coef"),
    Fact("--entropy-coef", _v(0.0), "learner.entropy_coef"),
    Fact("--disable-grpo-std-normalization", _v("none"), "loop.role_norm"),
    Fact("--spade-reward-normalization grpo (agent z-score per game)", _v(True), "loop.agent_group_std"),
    Fact("--spade-auto-compute-env-reward-scale (0 = auto)", _v(0.0), "selfplay.designer_reward_scale"),
    Fact("--spade-max-env-reward-scale (default)", _v(50.0), "selfplay.designer_reward_scale_max"),
    Fact("max_attempts of a game generation (spade_rollout.py)", _v(5), "selfplay.designer.max_attempts"),
    Fact("env_repair_turns (default 0: resample)", _v("resample"), "selfplay.designer.on_invalid"),
    Fact("--spade-no-train-on-env-trajectories (not set)", _v(True), "selfplay.train_designer"),
    Fact("--use-tis", _v("on"), "learner.is_cap", "always on in ours; is_cap is the truncation C"),
    Fact(
        "--global-batch-size",
        _v(192, tool4b=256),
        "learner.grad_accum_steps",
        "we train every sample of a step in one update, split into grad_accum_steps micro-batches",
    ),  # fmt: skip
    Fact("--save-interval", _v(16), "loop.checkpoint_every", "we checkpoint every step (async) for exact resume"),
    Fact(
        "--spade-use-env-validator (tool)",
        _v(None, tool=True, tool4b=True),
        "",
        "our gates validate every design (static checks, sandboxed probes, random-play win rate)",
    ),  # fmt: skip
)

_MISSING = object()


def ref_value(fact: Fact, script: str) -> Any:
    return fact.ref.get(script, fact.ref["*"])


def preset_value(cfg: Any, key: str) -> Any:
    """The value of dotted `key` in a RunConfig, or _MISSING when this code has no such field."""
    if not key:
        return _MISSING
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _norm(x: Any) -> Any:
    return tuple(x) if isinstance(x, list) else x


def comparisons() -> list[tuple[Fact, str, str, Any, Any]]:
    """(fact, script, preset, reference value, our value) for every checked pair: rows without a `why`, a
    reference value and a field of ours."""
    pairs = [(s, p, ()) for s, (_, p) in SCRIPTS.items() if p]
    pairs += [(s, p, skip) for p, (s, skip) in EXTRA_PRESETS.items()]
    cfgs = {p: load_run_config(p) for _, p, _ in pairs}
    out = []
    for fact in FACTS:
        if fact.why:
            continue
        for script, preset, skip in pairs:
            ref = ref_value(fact, script)
            ours = preset_value(cfgs[preset], fact.key)
            if ref is None or ours is _MISSING or fact.key in skip:
                continue
            out.append((fact, script, preset, ref, _norm(ours)))
    return out


def _show(x: Any) -> str:
    if x is _MISSING:
        return "—"
    if x is None:
        return "·"
    if x == REFERENCE_OBSERVATION_TEMPLATE:
        return "`qwen3_game` wrapper"
    if isinstance(x, tuple | list) and len(x) > 3:
        return f"{len(x)} skills"
    return f"`{x}`"


def _cells(values: list[Any]) -> str:
    shown = [_show(v) for v in values]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def render() -> str:
    """The markdown of docs/recipe.md."""
    presets = [p for _, p in SCRIPTS.values() if p] + list(EXTRA_PRESETS)
    cfgs = {p: load_run_config(p) for p in presets}
    head = [
        "# The recipe: reference flags against our paper presets",
        "",
        "Generated by `python -m spade_jax.config.recipe` from `spade_jax/config/recipe.py` (reference values,",
        "entered by hand from the reference's launch scripts) and the preset objects in `spade_jax/config/run.py`",
        "(our values, read when the table is generated). `tests/test_recipe.py` fails when this file is stale or",
        "when a row without a note disagrees. Do not edit by hand.",
        "",
        "Reference columns, in order: " + "; ".join(f"{k} = `{v[0]}`" for k, v in SCRIPTS.items()) + ".",
        "Our columns, in order: " + "; ".join(f"`{p}`" for p in presets)
        + f" (`paper-qwen3-4b-tool` follows {SCRIPTS['tool'][0]}; no preset follows tool4b, an earlier run).",
        "One value means all columns agree; `·` = not set there; `—` = no such field in this code.",
        "\"matches (checked)\": each preset equals the value of the script it follows (the test checks it).",
        "",
        "| reference flag | reference value | our config key | our value | note |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    checked = {c[0].flag for c in comparisons()}
    rows = []
    for fact in FACTS:
        ref = _cells([ref_value(fact, s) for s in SCRIPTS])
        ours = _cells([preset_value(cfgs[p], fact.key) for p in presets]) if fact.key else "—"
        if fact.why:
            note = f"differs on purpose: {fact.why}"
        else:
            note = "matches (checked)" if fact.flag in checked else "no such field in this code yet"
        rows.append(f"| `{fact.flag}` | {ref} | {f'`{fact.key}`' if fact.key else '—'} | {ours} | {note} |")
    return "\n".join(head + rows) + "\n"


DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "recipe.md"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m spade_jax.config.recipe", description="Write docs/recipe.md.")
    parser.add_argument("path", nargs="?", type=Path, default=DOC_PATH, help="where to write (default: %(default)s)")
    path = parser.parse_args(sys.argv[1:] if argv is None else argv).path
    path.write_text(render(), encoding="utf-8")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
