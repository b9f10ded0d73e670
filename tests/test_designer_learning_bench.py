"""benchmarks/designer_learning.py: its figures on records with known answers (rounds read from a real Memory, the
final designers' paired shares, the targets, the parents that stand still, the curriculum's correlation), and the paired
experiment end to end on the tiny preset: two runs of two design rounds with the agent frozen (its plays played and
scored, none trained), then both final designers writing from the same prompts, placed by one agent.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from spade_jax.envs.variants import extremes, make_variants
from spade_jax.selfplay.memory import Memory

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "designer_learning_bench", ROOT / "benchmarks" / "designer_learning.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["designer_learning_bench"] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()
BAND = (0.2, 0.8)


def test_knob_reads_a_constant_where_the_program_sets_it() -> None:
    easy, hard = extremes("simon_recall")
    assert bench.knob(easy.source, "GOAL") == easy.params["GOAL"] and bench.knob(hard.source, "GOAL") == 11
    assert bench.knob(easy.source, "LIVES") == easy.params["LIVES"]
    assert bench.knob("class Broken(:", "GOAL") is None and bench.knob("X = 'five'", "X") is None
    assert bench.knob("GOAL = 3\nclass A:\n    GOAL = 4\n", "GOAL") == 4.0, "the class's own value, set last"


def test_rounds_count_every_design_and_place_the_valid_ones() -> None:
    """Round 1: a design in band (0.25), one below it (0.0) and one refused; round 2: one at the band's top end."""
    mem = Memory()
    v = make_variants("simon_recall", 4)
    ids = []
    for step, source, valid in ((0, v[0].source, True), (0, v[1].source, True), (0, "class Broken:", False),
                                (1, v[2].source, True), (1, v[3].source, False)):  # fmt: skip
        rec = mem.record_attempt(source, kind="game", skill="memory recall", step=step, valid=valid, origin="mutation")
        ids.append(rec.id)
    for rid, rate in ((ids[0], 0.25), (ids[1], 0.0), (ids[3], 0.8)):
        mem.update_stats(rid, win_rate_no_hint=rate, plays=8)
    metrics = [{"step": 0}, {"step": 1, "design/targets": 3.0, "design/reward_mean": 0.3},
               {"step": 2, "design/targets": 2.0, "rollout/win_rate_no_hint": 0.4}]  # fmt: skip
    rows = bench.round_rows(mem.attempts(), metrics, BAND)
    mem.close()
    assert [(r["round"], r["designs"], r["valid"], r["in_band"]) for r in rows] == [(1, 3, 2, 1), (2, 2, 1, 1)]
    assert rows[0]["in_band_share"] == pytest.approx(1 / 3) and rows[0]["in_band_share_valid"] == 0.5
    assert rows[0]["valid_rate"] == pytest.approx(2 / 3) and rows[0]["reward"] == 0.3
    assert rows[1]["in_band_share"] == 0.5 and rows[1]["agent_win"] == 0.4, "0.8 is in [0.2, 0.8]"
    assert rows[1]["goal"] == v[2].params["GOAL"] and rows[0]["vendi"] > 1.0


def _design(i: int, valid: bool, rate: float | None, prompt: str = "p") -> dict:
    return {"design": i, "valid": float(valid), "gate": "" if valid else "step", "prompt": f"{prompt}{i % 2}",
            "source": f"src{i}" if valid else "", "win_rate": rate, "goal": 5.0 if valid else None,
            "in_band": float(valid and bench.in_band(rate, BAND))}  # fmt: skip


def test_final_designers_pair_design_by_design() -> None:
    trained = [_design(0, True, 0.5), _design(1, True, 0.25), _design(2, True, 0.0), _design(3, False, None)]
    control = [_design(0, True, 0.0), _design(1, False, None), _design(2, True, 0.0), _design(3, True, 0.9)]
    d = bench.design_figures(trained, control)
    assert d["designs"] == 4
    assert (d["in_band"]["trained"]["count"], d["in_band"]["control"]["count"]) == (2, 0)
    assert d["in_band"]["difference"]["mean"] == pytest.approx(0.5)
    assert d["valid"]["difference"]["mean"] == 0.0 and d["valid"]["trained"]["mean"] == 0.75
    assert d["trained_in_band_of_valid"] == pytest.approx(2 / 3) and d["control_in_band_of_valid"] == 0.0
    assert d["trained_refused_by"] == {"step": 1} and d["trained_distinct"] == 3
    t = bench.targets(d)
    assert t["in_band_diff"]["passed"] is (d["in_band"]["difference"]["lo"] > 0)
    assert t["valid_not_lower"]["passed"] is True, "an interval around 0 is not lower"
    worse = bench.targets(bench.design_figures(control[:1] * 4, trained[:1] * 4))
    assert worse["in_band_diff"]["passed"] is False
    with pytest.raises(ValueError, match="do not pair up"):
        bench.design_figures(trained, [_design(i, True, 0.5, prompt="q") for i in range(4)])
    assert bench.design_figures([], []) == {} and bench.targets({}) == {}


def test_a_lower_valid_rate_fails_its_target() -> None:
    trained = [_design(i, False, None) for i in range(10)]
    control = [_design(i, True, 0.5) for i in range(10)]
    t = bench.targets(bench.design_figures(trained, control))
    assert t["valid_not_lower"]["passed"] is False and t["valid_not_lower"]["hi"] == -1.0


def test_the_parents_stand_still_across_the_family() -> None:
    """The experiment's settings: the start seed's table spread over its difficulty as the only parents, each placed
    before the first prompt; the user's own KEY=VALUE come after them and win."""
    from spade_jax.config.run import load_run_config

    overrides = bench.experiment_overrides(8, 3, curriculum=False)
    cfg = load_run_config("demo", overrides)
    assert cfg.selfplay.memory.seed_difficulty == "spread" and cfg.selfplay.memory.seed_spread == bench.PARENTS
    assert cfg.selfplay.designer.mutation_parents == "seeds" and cfg.selfplay.designer.place_parents > 0
    assert cfg.selfplay.envs_per_step == 8 and cfg.loop.steps == 3 and not cfg.selfplay.train_agent
    mem = Memory(config=cfg.selfplay.memory)
    assert mem.seed_from_library() == bench.PARENTS
    goals = [bench.knob(r.code, "GOAL") for r in sorted(mem.archive(), key=lambda r: r.created)]
    assert goals[0] == extremes("simon_recall")[0].params["GOAL"] and goals[-1] == 11 and goals == sorted(goals)


def test_curriculum_figures_follow_goal_and_win_rate() -> None:
    rounds = [{"agent_win": w, "goal": g} for w, g in ((0.1, 5), (0.2, 5), (0.3, 6), (0.5, 7), (0.6, 7), (0.7, 9))]
    c = bench.curriculum_figures(rounds)
    assert c["rounds"] == 6 and c["corr_win_goal"] > 0.9
    assert (c["win_first"], c["goal_first"]) == (pytest.approx(0.15), 5.0) and c["goal_last"] == 8.0
    assert bench.curriculum_figures(rounds[:2]) == {"rounds": 2}


@pytest.mark.slow
def test_designer_learning_end_to_end_tiny(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    out = tmp_path / "bench"
    rc = bench.main(["--preset", "tiny", "--rounds", "2", "--designs", "2", "--out", str(out), "--eval-designs", "2",
                     "--eval-plays", "1", "selfplay.memory.seed_names=simon_recall",
                     # the tiny model's designs are refused, so the archived seed is played: the frozen agent's plays
                     "selfplay.fill_from_archive=true"])  # fmt: skip
    assert rc == 0
    fig = json.loads((out / "designer_learning.json").read_text())
    assert fig["lr"]["trained"] > 0 and "selfplay.train_agent=false" in fig["overrides"]
    for run in ("trained", "control"):
        assert [r["round"] for r in fig["rounds"][run]] == [1, 2] and all(r["designs"] == 2 for r in fig["rounds"][run])
        rows = [json.loads(line) for line in (out / run / "metrics.jsonl").read_text().splitlines()]
        played = [r for r in rows if r.get("rollout/episodes")]
        assert played, "the archived seed was played"
        # the agent's plays were made and scored, and never trained
        assert all(r.get("train/agent_samples", 0) == 0 and r["train/agent_not_trained"] > 0 for r in played)
        assert all("health/vendi_archive" in r and "health/step_learnable_frac" in r for r in played)
    runs = fig["runs"]
    assert runs["control"]["param_max_abs_change"] == 0.0
    # the parents: the run's seed spread over its table, each placed by the start agent, in both runs and the eval
    assert len(fig["eval"]["parents"]) == bench.PARENTS
    assert all(0.0 <= p["win_rate"] <= 1.0 for p in fig["eval"]["parents"])
    for run in ("trained", "control"):
        mem = Memory(out / run / "memory.sqlite")
        seeds = [r for r in mem.archive() if r.origin == "seed"]
        mutated = {r.mutation_of for r in mem.attempts() if r.origin == "mutation"}
        mem.close()
        assert len(seeds) == bench.PARENTS and all(r.plays >= bench.PARENT_PLAYS for r in seeds)
        assert mutated and mutated <= {r.id for r in seeds}, "every mutation shows one of the seeds"
    designs = {run: runs[run]["designs"] for run in ("trained", "control")}
    assert [d["prompt"] for d in designs["trained"]] == [d["prompt"] for d in designs["control"]]
    assert all((d["valid"] == 1.0) == (d["gate"] == "") for r in designs.values() for d in r)
    d = fig["designer_eval"]
    assert d["designs"] == 2 and set(fig["targets"]) == {"in_band_diff", "valid_not_lower"}
    assert (out / "designer_learning.png").stat().st_size > 10_000
    page = (out / "trained" / "report.html").read_text()
    assert "Dashed: the control run" in page and "Learnable share" in page


def test_the_device_curriculum_says_why_it_does_not_run_here(tmp_path: Path, monkeypatch, capsys) -> None:
    """On a machine without an accelerator it is one line and exit 0 (the device check goes on), nothing written."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    spec = importlib.util.spec_from_file_location("device_curriculum", ROOT / "benchmarks" / "device_curriculum.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--out", str(tmp_path / "c")]) == 0
    assert capsys.readouterr().out.strip() == "device_curriculum: no accelerator (jax sees only the CPU): skipped"
    assert not (tmp_path / "c").exists()
    monkeypatch.setenv("SPADE_JAX_GGUF", str(tmp_path / "missing.gguf"))
    assert module.model_path() is None, "a named model that is not there is no model"
