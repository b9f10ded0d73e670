"""Comparing the per-step metrics of two runs of the loop (a killed and resumed run against one never killed):
the rows of a metrics file without the figures that depend on timing, and the assertion that two agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

VOLATILE = ("time/", "perf/", "mem/", "rollout/wall_s", "rollout/policy_share", "rollout/pool_share",
            "rollout/episodes_per_s", "rollout/host_wall_s")  # fmt: skip


def pool_overrides(pool_dir: Path) -> list[str]:
    """A 3-step tiny run on a fixed pool (one environment whose reward a random policy gets half the time)."""
    return [f"loop.pool={pool_dir}", "loop.steps=3", "loop.eval_plays=0", "loop.pool_envs_per_step=1",
            "selfplay.plays_per_condition=3", "learner.lr=3e-3"]  # fmt: skip


def metrics(run_dir: Path) -> list[dict]:
    return rows((Path(run_dir) / "metrics.jsonl").read_text())


def rows(text: str) -> list[dict]:
    """The whole rows of a metrics file's text, timing figures left out."""
    out = [json.loads(line) for line in text.splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in out]


def assert_same_metrics(reference: list[dict], resumed: list[dict]) -> None:
    assert [r["step"] for r in resumed] == [1, 2, 3]
    for want, got in zip(reference, resumed):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), f"step {want['step']}: {key}"
