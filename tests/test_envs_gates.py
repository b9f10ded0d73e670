"""Validation gates on real programs: every broken environment is rejected at the right gate with a reason
naming the problem; every seed environment is accepted (in the sandbox, at the strongest level available).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from players import expectation

from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.gates.sandboxed import GATES, GateConfig, validate, validate_static

BROKEN_DIR = Path(__file__).parent / "broken_envs"
SEEDS = {s.name: load_seed_source(s.name) for s in list_seeds()}
STATIC_GATES = ("extract", "static")


BROKEN = sorted(p for p in BROKEN_DIR.iterdir() if p.suffix in (".py", ".txt"))
STATIC_CASES = [p for p in BROKEN if expectation(p)[0] in STATIC_GATES]
DYNAMIC_CASES = [p for p in BROKEN if expectation(p)[0] not in STATIC_GATES]


@pytest.fixture(scope="module")
def pool():
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    p = HostPool(num_workers=2, sandbox=SandboxConfig(level="auto", call_timeout_s=3.0, load_timeout_s=3.0))
    yield p
    p.close()


def test_corpus_covers_every_gate():
    assert len(BROKEN) >= 30
    gates = {expectation(p)[0] for p in BROKEN}
    assert gates == set(GATES), f"gates without a broken program: {set(GATES) - gates}"


@pytest.mark.parametrize("path", STATIC_CASES, ids=lambda p: p.stem)
def test_broken_env_rejected_statically(path):
    gate, reason = expectation(path)
    verdict = validate_static(path.read_text(encoding="utf-8"))
    assert not verdict.valid
    assert verdict.gate == gate, str(verdict)
    assert re.search(reason, verdict.reason), str(verdict)
    assert "\n" not in verdict.reason


@pytest.mark.sandbox
@pytest.mark.parametrize("path", DYNAMIC_CASES, ids=lambda p: p.stem)
def test_broken_env_rejected_in_sandbox(path, pool):
    gate, reason = expectation(path)
    assert validate_static(path.read_text(encoding="utf-8")).valid  # it only fails once it runs
    archive = SEEDS if gate == "novelty" else ()
    run_like = GateConfig(seed_key="a-run-secret-0f3c9e")  # as a run validates: with a key of its own
    verdict = validate(path.read_text(encoding="utf-8"), pool, archive=archive, config=run_like)
    assert not verdict.valid
    assert verdict.gate == gate, str(verdict)
    assert re.search(reason, verdict.reason), str(verdict)
    assert "\n" not in verdict.reason


@pytest.mark.sandbox
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_env_is_accepted(name, pool):
    others = {k: v for k, v in SEEDS.items() if k != name}
    verdict = validate(SEEDS[name], pool, archive=others)
    assert verdict.valid, str(verdict)
    assert verdict.gate == "novelty"
    d = verdict.details
    assert d["random_win_rate"] <= 0.15
    cfg = GateConfig()
    assert d["random_episodes"] == cfg.random_episodes + (cfg.generic_episodes if d["has_random_action"] else 0)
    if d.get("has_reference_action"):
        assert d["reference_win_rate"] == 1.0, "the seed's reference policy should win"
    json.dumps(verdict.to_dict())  # plain data all the way down


@pytest.mark.sandbox
def test_designer_completion_is_extracted_then_validated(pool):
    completion = (
        "<think>A Nim variant would be fun.</think>\nHere is the environment:\n\n```python\n"
        + SEEDS["nim_duel"]
        + "```\nThe agent must keep the nim-sum at zero."
    )
    verdict = validate(completion, pool)
    assert verdict.valid, str(verdict)
    assert verdict.source.strip() == SEEDS["nim_duel"].strip()


# ---------------------------------------------------------------------------------------------- CLI


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    from spade_jax.cli import main

    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.sandbox
def test_cli_valid_seed_exits_zero(capsys, tmp_path):
    path = tmp_path / "nim.py"
    path.write_text(SEEDS["nim_duel"], encoding="utf-8")
    rc, out, _ = _cli(["validate-env", str(path), "--json", "--against-seeds"], capsys)
    data = json.loads(out)
    assert rc == 0 and data["valid"] and data["gate"] == "novelty"
    assert data["details"]["random_episodes"] > 0


@pytest.mark.sandbox
def test_cli_duplicate_of_seed_is_rejected(capsys):
    rc, out, _ = _cli(["validate-env", str(BROKEN_DIR / "duplicate_of_seed.py"), "--against-seeds"], capsys)
    assert rc == 1
    assert "INVALID" in out and "gate:   novelty" in out and "nim_duel" in out


def test_cli_static_failure_and_bad_input(capsys, tmp_path):
    rc, out, _ = _cli(["validate-env", str(BROKEN_DIR / "uses_eval.py")], capsys)
    assert rc == 1 and "gate:   static" in out and "'eval'" in out
    rc, _, err = _cli(["validate-env", str(tmp_path / "missing.py")], capsys)
    assert rc == 2 and "no such file" in err and len(err.strip().splitlines()) == 1
    binary = tmp_path / "bin.py"
    binary.write_bytes(b"\xff\xfe\x00bad")
    rc, _, err = _cli(["validate-env", str(binary)], capsys)
    assert rc == 2 and "UTF-8" in err


@pytest.mark.sandbox
def test_time_budget_and_index_archive(pool):
    from spade_jax.gates.novelty import NoveltyIndex

    slow = validate(SEEDS["grid_maze"], pool, config=GateConfig(time_budget_s=0.0))
    assert not slow.valid and slow.gate == "reset" and "budget" in slow.reason
    index = NoveltyIndex()
    index.add("maze", SEEDS["grid_maze"])
    dup = validate(SEEDS["grid_maze"], pool, archive=index)
    assert not dup.valid and dup.gate == "novelty" and "'maze'" in dup.reason
    assert dup.details["random_episodes"] >= GateConfig().random_episodes  # every earlier gate ran


@pytest.mark.sandbox
def test_fewer_turns_still_validates_a_seed(pool):
    verdict = validate(SEEDS["nim_duel"], pool, config=GateConfig(max_turns=8, random_episodes=6, generic_episodes=2))
    assert verdict.valid, str(verdict)
    assert verdict.details["random_episodes"] == 8 and verdict.details["random_policy"] == "env+generic"
