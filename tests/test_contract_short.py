"""The short contract for small models: under 700 SmolLM2 tokens, the essentials in it, its example a valid
environment, and `designer.contract` choosing the text of the designer prompt (so the warm start's designer
examples, rendered by the same `Designer.fit`, use it too)."""

from __future__ import annotations

import re

import pytest

from spade_jax.config.selfplay import DesignerConfig
from spade_jax.envs.contract import CONTRACT_TEXT, CONTRACT_TEXT_SHORT, contract_text
from spade_jax.gates.sandboxed import validate
from spade_jax.selfplay.designer import Designer, DesignTarget, PromptParts, design_messages
from spade_jax.selfplay.memory import Memory

POOL_WORKERS = 1
ESSENTIALS = ("KIND", "SKILL", "NAME", "setup(self)", "play(self, command)", "self.win(", "self.lose(", "\\boxed{",
              "self.rng", "check_answer", "@tool(", "ToolError", "<answer>", "15%", "spade_jax.envs.base",
              "itertools", "random_action(self, rng)", "reference_action", "hint(self)")  # fmt: skip


def test_short_contract_is_short_and_has_the_essentials(tokenizer):
    n_short = len(tokenizer.encode(CONTRACT_TEXT_SHORT, add_special_tokens=False))
    n_full = len(tokenizer.encode(CONTRACT_TEXT, add_special_tokens=False))
    assert n_short < 700 < n_full, (n_short, n_full)
    for needle in ESSENTIALS:
        assert needle in CONTRACT_TEXT_SHORT, needle


def test_short_contract_example_passes_every_gate(pool):
    (code,) = re.findall(r"```python\n(.*?)```", CONTRACT_TEXT_SHORT, re.S)
    verdict = validate(code, pool)
    assert verdict.valid, str(verdict)


def test_config_switch_validated_and_used_by_the_prompt(tokenizer):
    assert DesignerConfig().contract == "full"
    with pytest.raises(ValueError, match="designer.contract"):
        DesignerConfig(contract="tiny")
    with pytest.raises(ValueError, match="unknown contract"):
        contract_text("tiny")
    parts = PromptParts(DesignTarget("game", "memory recall"))
    short = design_messages(parts, "short")[-1]["content"]
    assert CONTRACT_TEXT_SHORT.strip() in short and CONTRACT_TEXT.strip() not in short
    assert CONTRACT_TEXT.strip() in design_messages(parts)[-1]["content"]

    class _Sampler:
        max_total_len = 4096

    sizes = {}
    for name in ("full", "short"):
        cfg = DesignerConfig(contract=name, max_new_tokens=1024, context_len=4096, use_corpus=False)
        designer = Designer(_Sampler(), tokenizer, None, Memory(), cfg)
        msgs, ids, _ = designer.fit(designer.parts_for(DesignTarget("game", "memory recall")))
        assert contract_text(name).strip() in msgs[-1]["content"]
        sizes[name] = len(ids)
    assert sizes["short"] < 900 < sizes["full"], sizes


def test_switches_reachable_from_the_run_config():
    from spade_jax.config.overrides import ConfigError
    from spade_jax.config.run import load_run_config

    over = ["selfplay.designer.contract=short", "warmstart.designer_variants_per_seed=3",
            "warmstart.designer_variant_direction=easier"]  # fmt: skip
    cfg = load_run_config("demo", over)
    assert cfg.selfplay.designer.contract == "short"
    assert (cfg.warmstart.designer_variants_per_seed, cfg.warmstart.designer_variant_direction) == (3, "easier")
    with pytest.raises((ConfigError, ValueError), match="contract"):
        load_run_config("demo", ["selfplay.designer.contract=tiny"])


def test_gym_contract_example_passes_every_gate_and_the_prompt_asks_for_that_format(pool, tokenizer):
    """`designer.contract=gym`: the paper's format in about the short text's size, its example valid here,
    and the prompt asking for a class named ...Env instead of our KIND/SKILL attributes."""
    from spade_jax.envs.contract import CONTRACT_TEXT_GYM
    from spade_jax.envs.formats import source_contract

    (code,) = re.findall(r"```python\n(.*?)```", CONTRACT_TEXT_GYM, re.S)
    assert source_contract(code) == "gym"
    verdict = validate(code, pool)
    assert verdict.valid and verdict.details["contract"] == "gym", str(verdict)
    assert len(tokenizer.encode(CONTRACT_TEXT_GYM, add_special_tokens=False)) < 800
    gym = design_messages(PromptParts(DesignTarget("game", "memory recall")), "gym")[-1]["content"]
    assert CONTRACT_TEXT_GYM.strip() in gym and "ending in Env" in gym and "KIND =" not in gym
    ours = design_messages(PromptParts(DesignTarget("game", "memory recall")), "short")[-1]["content"]
    assert 'KIND = "game"' in ours
