"""benchmarks/learning.py: the bootstrap on cases with known answers, and the paired experiment end to end on
the tiny preset (a short shared warm start, then 2 steps): both runs' figures, well-formed intervals, paired
episodes, a control that never moved from the warm start, a trained run that did, and the trained run's report
drawn against the control.

The end-to-end run plays a fixed pool holding one coin-flip environment (as test_loop_resume does), so the
tiny random model gets a reward spread and the trained run really takes learner steps.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from players import COIN_ENV

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("learning_bench", ROOT / "benchmarks" / "learning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_bench"] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_bootstrap_known_answers() -> None:
    x = np.array([1, 0, 1, 1, 0, 0, 1, 0] * 5, dtype=float)
    assert bench.bootstrap_diff(x, x) == (0.0, 0.0, 0.0), "paired: identical runs differ by exactly 0"
    m, lo, hi = bench.bootstrap_diff(x, x, paired=False)
    assert m == 0.0 and lo < 0.0 < hi, "unpaired: an interval around 0"
    for paired in (True, False):
        assert bench.bootstrap_diff(np.ones(30), np.zeros(30), paired=paired) == (1.0, 1.0, 1.0)
        assert bench.bootstrap_diff(np.zeros(30), np.ones(30), paired=paired) == (-1.0, -1.0, -1.0)
    # Half the episodes won against none: the difference is 0.5, its interval about +-2 sd = +-0.14 around it.
    m, lo, hi = bench.bootstrap_diff(np.tile([1.0, 0.0], 25), np.zeros(50))
    assert m == 0.5 and 0.3 < lo < 0.5 < hi < 0.7
    assert bench.bootstrap_diff(x, 1 - x, seed=3) == bench.bootstrap_diff(x, 1 - x, seed=3), "deterministic"
    m, lo, hi = bench.bootstrap_mean(np.tile([1.0, 0.0, 0.0, 0.0], 25))
    assert m == 0.25 and 0.15 < lo < 0.25 < hi < 0.35
    with pytest.raises(ValueError):
        bench.bootstrap_diff(np.ones(3), np.ones(4))


def test_valid_rate_counts_only_second_half_design_rounds() -> None:
    """An 8-step run with design rounds at steps 1 and 5 (2 designs each): the second half is step 5 alone."""
    rounds = {1: (2, 1.0), 5: (2, 0.5)}
    rows = [{"step": s, **({"design/targets": float(rounds[s][0]), "design/valid_frac": rounds[s][1]}
                           if s in rounds else {})} for s in range(9)]  # fmt: skip
    control = [dict(r, **({"design/valid_frac": 0.25, "design/targets": 4.0} if r["step"] == 5 else {})) for r in rows]
    assert bench.second_half_designs(rows, 8) == (1, 2)
    v = bench.valid_rate_figures(rows, control, 8)
    assert v["designs"] == {"trained": (1, 2), "control": (1, 4)}
    assert v["ratio"] == 2.0, "0.5 against 0.25"
    from learning_output import designs_text  # beside learning.py, which put its folder on sys.path

    assert designs_text(v, "control") == "0.25 (1 of 4 designs)"
    assert bench.targets({}, v)["valid_rate_ratio"]["limit"] == "", "at 25% the control leaves room for 2x"


def test_a_valid_rate_ratio_out_of_reach_says_why() -> None:
    """A control valid 75% of the time caps the ratio at 1/0.75 = 1.33, whatever the trained designer does."""
    assert bench.ratio_limit(0.75) == (
        "out of reach: the control's valid rate is 75%, so the ratio is at most 1.33 (every trained design valid)"
    )
    assert bench.ratio_limit(0.5) == "" and bench.ratio_limit(None) == "" and bench.ratio_limit(0.0) == ""


def test_designer_figures_pair_designs_by_prompt() -> None:
    rows = lambda valid, prompts="abcd": [{"design": i, "valid": v, "gate": "" if v else "step", "prompt": p}  # noqa: E731
                                         for i, (v, p) in enumerate(zip(valid, prompts))]  # fmt: skip
    d = bench.designer_figures(rows([1.0, 1.0, 0.0, 1.0]), rows([1.0, 0.0, 0.0, 0.0]))
    assert d["valid"] == {"trained": 3, "control": 1} and d["ratio"] == 3.0
    assert d["difference"]["mean"] == pytest.approx(0.5)
    assert d["refused_by"] == {"trained": {"step": 1}, "control": {"step": 3}}
    assert bench.designer_figures([], []) == {}
    with pytest.raises(ValueError, match="do not pair up"):
        bench.designer_figures(rows([1.0, 0.0]), rows([1.0, 0.0], prompts="ax"))


def test_easiest_variants_are_easier_than_the_seed() -> None:
    from spade_jax.envs.seeds import load_seed_source
    from spade_jax.envs.variants import PARAMS, difficulty, seed_params

    for seed in ("grid_maze", "memory_pairs", "ledger_settle", "date_offset"):
        got = bench.easiest_variants(seed, 3)
        assert 1 <= len(got) <= 3
        own = difficulty(seed, seed_params(load_seed_source(seed), seed))
        assert all(v.difficulty < own for v in got)
        assert [v.difficulty for v in got] == sorted(v.difficulty for v in got)
        assert got[0].difficulty == min(v.difficulty for v in bench.easiest_variants(seed, 10_000))
        assert set(got[0].params) == set(PARAMS[seed])
    envs = bench.eval_envs(("grid_maze",), 2)
    assert [e["group"] for e in envs] == ["seed", "variant", "variant"] and envs[0]["env"] == "grid_maze"


def test_family_evaluation_skips_what_a_run_played() -> None:
    import ast

    from spade_jax.envs.seeds import load_seed_source
    from spade_jax.envs.variants import extremes, seed_params

    easy = extremes("sonar_hunt")[0]
    played = {"sonar_hunt": {tuple(sorted(easy.params.items()))}}
    envs = bench.eval_envs((), 0, ("sonar_hunt",), played, family_k=3)
    assert len(envs) == 3 and {e["group"] for e in envs} == {"family"}
    written = seed_params(load_seed_source("sonar_hunt"), "sonar_hunt")
    for e in envs:
        ast.parse(e["source"])
        knobs = seed_params(e["source"], "sonar_hunt")
        assert knobs != easy.params and knobs != written  # neither the played nor the warm-started program


def _ok(x: dict) -> bool:
    return -1.0 <= x["lo"] <= x["mean"] <= x["hi"] <= 1.0


@pytest.mark.slow
def test_learning_bench_end_to_end_tiny(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "parity_game.py").write_text(COIN_ENV)
    out = tmp_path / "bench"
    rc = bench.main(["--preset", "tiny", "--steps", "2", "--out", str(out), "--eval-variants", "1",
                     "--eval-plays", "2", "--trained-envs", "3", "--eval-designs", "2", f"loop.pool={pool}",
                     "loop.pool_envs_per_step=1",
                     "selfplay.plays_per_condition=3", "loop.held_out=grid_maze,date_offset",
                     # A short warm start, run once and shared: the control keeps it and takes no RL step.
                     "loop.warmstart=true", "warmstart.epochs=1", "warmstart.designer_examples_per_seed=0",
                     "warmstart.probe_designs=0", "warmstart.agent_episodes_per_seed=1"])  # fmt: skip
    assert rc == 0
    fig = json.loads((out / "learning.json").read_text())

    runs = fig["runs"]
    assert set(runs) == {"trained", "control"}
    assert runs["control"]["lr"] == 0.0 and runs["trained"]["lr"] > 0
    assert runs["trained"]["checkpoint_step"] == runs["control"]["checkpoint_step"] == 2
    # Same episodes in both runs (environment, play), in the same order: the pairing of the bootstrap.
    key = lambda eps: [(e["env"], e["play"]) for e in eps]  # noqa: E731
    assert key(runs["trained"]["episodes"]) == key(runs["control"]["episodes"])
    # 2 seeds x (seed + 1 variant) x 2 plays, then the one environment both runs trained on (the pool's) x 2
    assert len(runs["trained"]["episodes"]) == 2 * 2 * 2 + 2
    assert [e["group"] for e in runs["trained"]["episodes"]][-2:] == ["trained", "trained"]
    assert all(e["won"] in (0.0, 1.0) for r in runs.values() for e in r["episodes"])

    # Both runs start from the one warm start; from there the control never moved, and the trained run did,
    # having taken learner steps on the coin-flip rewards.
    assert fig["warm_start_dir"] == str(out / "start")
    for run in ("trained", "control"):
        rows = [json.loads(line) for line in (out / run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [0, 1, 2] and "warmstart/examples" in rows[0]
    assert runs["control"]["param_max_abs_change"] == 0.0
    trained_rows = [json.loads(line) for line in (out / "trained" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("train/skipped") == 0.0 for r in trained_rows), "the trained run should take a learner step"
    assert runs["trained"]["param_max_abs_change"] > 0.0

    for group in ("all", "seed", "variant"):
        g = fig["heldout"][group]
        assert all(_ok(g[run]) for run in ("trained", "control", "difference")), (group, g)
        assert g["difference"]["mean"] == pytest.approx(g["trained"]["mean"] - g["control"]["mean"])
    assert fig["heldout"]["all"]["episodes"] == 8  # held-out only: the trained-on environment is apart
    assert fig["heldout"]["trained"]["episodes"] == 2 and _ok(fig["heldout"]["trained"]["difference"])
    assert set(fig["heldout"]["per_env"]) == {e["env"] for e in fig["eval"]["environments"]}

    # The final designers wrote from the same prompts (same targets and seeds: the state rolled back between
    # runs), each design gated; their valid rates come with intervals and a paired difference.
    designs = {run: runs[run]["designs"] for run in ("trained", "control")}
    assert [d["design"] for d in designs["trained"]] == [0, 1]
    assert [d["prompt"] for d in designs["trained"]] == [d["prompt"] for d in designs["control"]]
    assert all((d["valid"] == 1.0) == (d["gate"] == "") for r in designs.values() for d in r)
    d = fig["designer_eval"]
    assert d["designs"] == 2 and all(_ok(d[run]) for run in ("trained", "control", "difference"))
    assert d["valid"]["trained"] == sum(x["valid"] for x in designs["trained"])

    steps = [r["step"] for r in fig["per_step"]]
    assert steps == [1, 2]
    last = fig["per_step"][-1]
    assert last["heldout_win/trained"] is not None and last["heldout_win/control"] is not None  # eval_every=2
    assert set(fig["targets"]) == {"heldout_win_diff", "valid_rate_ratio"}
    assert all(isinstance(t["passed"], bool) for t in fig["targets"].values())

    assert (out / "learning.png").stat().st_size > 10_000
    page = (out / "trained" / "report.html").read_text()
    assert "Dashed: the control run" in page and str(out / "control") in page
