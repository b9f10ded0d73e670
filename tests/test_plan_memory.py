"""The memory plan (benchmarks/plan_memory.py): hand-computed figures for a few cells, and docs/scaling.md holds
the table the script generates now (so the docs cannot drift from the presets and the sharding rules)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


@pytest.fixture(scope="module")
def pm():
    spec = importlib.util.spec_from_file_location("plan_memory", ROOT / "benchmarks" / "plan_memory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _hw(pm, name: str):
    return next(h for h in pm.HARDWARE if h.name.startswith(name))


def test_dense_8b_on_8_gpus_by_hand(pm) -> None:
    p = pm.plan("qwen3-8b", _hw(pm, "8x H100"))
    assert p.mesh == {"fsdp": 8}
    # Qwen3-8B: 36 layers, hidden 4096, 32 q / 8 kv heads of 128, MLP 12288, vocab 151936, untied head
    e, layers, v = 4096, 36, 151936
    per_layer = e * 128 * (32 + 8 + 8) + 32 * 128 * e + 3 * e * 12288 + 2 * e + 2 * 128
    total = 2 * v * e + layers * per_layer + e
    assert p.total_params == total == p.active_params
    replicated = layers * (2 * e + 2 * 128) + e  # norm scales are not split
    assert p.params == 4 * ((total - replicated) / 8 + replicated)  # fp32, FSDP over 8
    assert p.grads == p.params and p.opt == 2 * p.params  # AdamW: two fp32 moments per weight
    assert p.kv_token == 2 * layers * 8 * 128 * 2  # K and V, bf16
    assert p.kv_agent == 768 / 8 * 32768 * p.kv_token  # 768 episodes of up to 32K tokens over 8 devices
    assert p.sampler_copy == p.params / 2  # the sampler's bf16 copy, sharded as the masters
    free = 0.9 * 80e9 - p.params - p.opt - p.sampler_copy
    assert p.fit_episodes == int(free // (32768 * p.kv_token))


def test_moe_30b_expert_parallel_by_hand(pm) -> None:
    p = pm.plan("qwen3-30b-a3b", _hw(pm, "TPU v5p"))
    assert p.mesh == {"expert": 8, "fsdp": 4}
    experts = 48 * 128 * 3 * 2048 * 768
    assert abs(p.total_params / 1e9 - 30.5) < 0.05 and abs(p.active_params / 1e9 - 3.3) < 0.1
    assert p.active_params == p.total_params - experts * 120 // 128
    # every weight split 32 ways (experts over expert x fsdp, the rest over fsdp x expert), norms replicated
    assert math.isclose(p.params / 4, p.total_params / 32, rel_tol=1e-3)


def test_remat_policy_of_the_presets_is_what_fits_on_the_tpu_slice(pm) -> None:
    """What each remat policy keeps, by hand for Qwen3-4B (36 layers, hidden 2560, 32 q / 8 kv heads of 128, MLP
    9728), one 32K row per chip; the paper presets set the policy the plan picks there."""
    p = pm.plan("qwen3-4b", _hw(pm, "TPU v5p"))
    assert p.micro_rows == 1  # 768 agent rows / 24 accumulation steps / 32 chips
    per_token = {"nothing": 2560}
    per_token["attn"] = 2560 + 32 * 128 + 2 * 8 * 128 + 2560 + 32 * 128 + 2 * 32  # q k v o, attention out, lse
    per_token["mlp"] = 2560 + 2 * 9728 + 2560
    per_token["dots"] = per_token["attn"] + per_token["mlp"] - 2560
    for policy, n in per_token.items():
        assert p.saved_by_policy[policy] == 32768 * 36 * n * 2.0, policy  # bf16
    for model in pm.MODELS:
        plan = pm.plan(model, _hw(pm, "TPU v5p"))
        assert plan.remat_fits == plan.remat_policy == "attn", model


@pytest.mark.slow
def test_docs_table_is_current(pm) -> None:
    doc = (ROOT / "docs" / "scaling.md").read_text()
    section = doc.split(pm.BEGIN, 1)[1].split(pm.END, 1)[0]
    assert section.strip() == pm.tables(pm.all_plans()).strip(), (
        "run: python benchmarks/plan_memory.py --write docs/scaling.md"
    )
