"""report.html shows learning: key curves with a control run's (dashed), the environment browser by regret
with mutation parent <-> child links, and the first and last generated environments side by side.

The run directory is made of real parts: metrics.jsonl written by MetricsLogger, environment rows from a real
Memory (seeds from the library, designer attempts, a mutation of a seed) passed through loop._report_envs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.envs.variants import make_variants
from spade_jax.report import KEY_PANELS, plot_metrics, write_report
from spade_jax.report.envs import by_regret, first_last, report_envs
from spade_jax.report.plots import CONTROL_SUFFIX
from spade_jax.run.learn import band_stats
from spade_jax.rundir.metrics import MetricsLogger, read_metrics
from spade_jax.selfplay.memory import Memory

TRAINED = {"eval/win_rate": [0.1, 0.3, 0.5], "design/valid_frac": [0.0, 0.5, 1.0],
           "design/reward_mean": [0.0, 0.4, 0.8], "env/regret_mean": [0.0, 0.1, 0.2],
           "env/in_band_frac": [0.0, 0.5, 1.0], "rollout/win_rate_no_hint": [0.2, 0.4, 0.6],
           # the paper's health measures (selfplay/health.py), one quantity of each of their panels
           "health/learnable_frac": [0.16, 0.2, 0.31], "health/vendi_archive": [1.0, 1.8, 2.5],
           "health/archive_top_class_share": [1.0, 0.8, 0.5], "health/archive_longest_class_run": [1.0, 3.0, 4.0],
           "health/regret_mean": [-0.1, 0.0, 0.1], "health/blend_plateau_part": [0.0, 0.3, 0.6]}  # fmt: skip
CONTROL = {k: [v[0]] * 3 for k, v in TRAINED.items()}  # the control stays where it started


def _log(run_dir: Path, series: dict[str, list[float]]) -> None:
    logger = MetricsLogger(run_dir, tensorboard=False)
    for i in range(3):
        logger.log(i + 1, {k: v[i] for k, v in series.items()} | {"train/loss": 0.1 * i})
    logger.close()


@pytest.fixture()
def run(tmp_path: Path):
    """(run dir, control dir, env rows, ids by role) of a small but real-shaped run."""
    run_dir, control_dir = tmp_path / "trained", tmp_path / "control"
    _log(run_dir, TRAINED)
    _log(control_dir, CONTROL)
    mem = Memory(run_dir / "memory.sqlite")
    seeds = [s for s in list_seeds() if s.name in ("number_target", "nim_duel", "secret_word")]
    mem.seed_from_library(seeds)
    variants = make_variants("number_target", 3, direction="any")
    first = mem.record_attempt(variants[0].source, kind="game", skill="mathematical reasoning", step=0,
                               valid=True, name=variants[0].name)  # fmt: skip
    bad = mem.record_attempt("class Broken:", kind="game", skill="pattern recognition", step=1, valid=False,
                             gate="static", reason="no GameEnv subclass")  # fmt: skip
    child = mem.record_attempt(variants[1].source, kind="game", skill="mathematical reasoning", step=2, valid=True,
                               name=variants[1].name, origin="mutation", mutation_of="seed-number_target")  # fmt: skip
    last = mem.record_attempt(load_seed_source("nim_duel").replace("nim_duel", "nim_duel_2"), kind="game",
                              skill="strategic planning", step=3, valid=True, name="nim_duel_2")  # fmt: skip
    # Regrets: child 0.5 > seed number_target 0.3 > first 0.1 > seed nim_duel -0.2; last, secret_word and the
    # rejected attempt are never measured.
    for env_id, wr, regret in ((first.id, 0.9, 0.1), (child.id, 0.5, 0.5), ("seed-number_target", 0.4, 0.3),
                               ("seed-nim_duel", 0.0, -0.2)):  # fmt: skip
        mem.update_stats(env_id, win_rate_no_hint=wr, win_rate_hint=min(1.0, wr + regret), regret=regret,
                         designer_reward=0.7, plays=4)  # fmt: skip
    envs = report_envs([dataclasses.asdict(r) for r in mem.attempts()])
    mem.close()
    ids = {"first": first.id, "bad": bad.id, "child": child.id, "last": last.id, "parent": "seed-number_target"}
    return run_dir, control_dir, envs, ids


def _rows(page: str) -> dict[str, str]:
    """Browser entry id -> the entry's HTML, in page order."""
    browser = page.split("<div class=browser>", 1)[1].split("<h2>", 1)[0]
    return {m.group(1): m.group(0) for m in re.finditer(r'<div id="env-([^"]+)" class=env>.*?</details></div>', browser,
                                                         re.S)}  # fmt: skip


def test_key_panels_draw_the_control_dashed_in_the_same_colour(run, tmp_path: Path) -> None:
    run_dir, control_dir, _, _ = run
    rows, control_rows = read_metrics(run_dir / "metrics.jsonl"), read_metrics(control_dir / "metrics.jsonl")
    key, diag = plot_metrics(rows, tmp_path, control_rows)
    panels = {p.title: p for p in key}
    assert set(panels) == set(KEY_PANELS), "every key quantity logged gets its panel"
    for title, names in KEY_PANELS.items():
        panel = panels[title]
        assert panel.path.exists()
        for name in names:
            if name not in TRAINED:
                assert name not in panel.labels
                continue
            own = next(line for line in panel.lines if line.label == name)
            ctl = next(line for line in panel.lines if line.label == name + CONTROL_SUFFIX)
            assert (own.control, ctl.control) == (False, True)
            assert own.color == ctl.color
            assert own.values == TRAINED[name] and ctl.values == CONTROL[name]
            assert ctl.steps == [1, 2, 3]
    assert [p.title for p in diag] == ["Learner loss"]
    assert all(p.png.startswith(b"\x89PNG") and p.data_uri.startswith("data:image/png;base64,") for p in key + diag)
    pngs = sorted(p.name for p in tmp_path.glob("plot_*.png"))  # what the quickstart notebook displays, in order
    assert pngs == [p.path.name for p in key + diag]
    # Without a control: no control curves at all.
    key_alone, _ = plot_metrics(rows, tmp_path)
    assert all(not line.label.endswith(CONTROL_SUFFIX) for p in key_alone for line in p.lines)
    assert all(len(p.lines) == len([n for n in KEY_PANELS[p.title] if n in TRAINED]) for p in key_alone)


def test_report_browser_links_and_first_last(run) -> None:
    run_dir, control_dir, envs, ids = run
    page = write_report(run_dir, envs=envs, control=control_dir).read_text()
    assert "Dashed: the control run" in page and str(control_dir) in page and "control (lr 0)" in page
    assert "<td>eval/win_rate</td><td class=num>0.5</td><td class=num>0.1</td><td class=num>0.4</td>" in page

    rows = _rows(page)
    order = list(rows)
    assert order[:4] == [ids["child"], ids["parent"], ids["first"], "seed-nim_duel"], "measured, by regret"
    assert set(order[4:]) == {ids["last"], "seed-secret_word", ids["bad"]}, "unmeasured last"
    assert order[-1] == ids["bad"], "rejected attempts after the valid unmeasured ones"
    assert [e["id"] for e in by_regret(envs)] == order

    # Parent <-> child links, and every link lands on an entry of the page.
    assert f'mutation of <a href="#env-{ids["parent"]}">number_target</a>' in rows[ids["child"]]
    assert f'mutations: <a href="#env-{ids["child"]}">' in rows[ids["parent"]]
    assert "mutation" not in rows[ids["first"]].split("<details>", 1)[0]
    for target in re.findall(r'href="#env-([^"]+)"', page):
        assert target in rows, f"dangling link to {target}"

    # First and last generated (designer or mutation, valid) environments, side by side, with their code.
    pair = page.split("<div class=pair>", 1)[1].split("<h2>", 1)[0]
    cols = pair.split("<div class=col>")[1:]
    assert len(cols) == 2
    assert "First generated" in cols[0] and f"#env-{ids['first']}" in cols[0]
    assert "Last generated" in cols[1] and f"#env-{ids['last']}" in cols[1]
    assert "nim_duel_2" in cols[1] and "<pre>" in cols[1] and "0.9" in cols[0]
    first, last = first_last(envs)
    assert (first["id"], last["id"]) == (ids["first"], ids["last"])

    # A mutation whose parent is not among the rows (e.g. trimmed) names it without a dangling link.
    orphan = [{**e, "mutation_of": "gone"} if e["id"] == ids["child"] else e for e in envs]
    row = _rows(write_report(run_dir, envs=orphan).read_text())[ids["child"]]
    assert "mutation of gone" in row and 'href="#env-gone"' not in row


def test_report_without_control_or_generated_envs(tmp_path: Path) -> None:
    _log(tmp_path, TRAINED)
    page = write_report(tmp_path, envs=[]).read_text()
    assert "(control)" not in page and "control (lr 0)" not in page
    assert "wrote no valid environment" in page and "No environments recorded" in page
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path, control=tmp_path / "missing")


def test_band_stats_counts_measured_envs_in_the_band() -> None:
    envs = [{"measured": True, "win_rate_no_hint": w} for w in (0.0, 0.15, 0.5, 0.85, 0.9)]
    envs.append({"measured": False, "win_rate_no_hint": 0.5})
    assert band_stats(envs, (0.15, 0.85)) == {"env/in_band_frac": 3 / 5}
    assert band_stats([], (0.15, 0.85)) == {}


def test_report_is_one_file_that_reads_at_4_steps_and_at_400(tmp_path: Path) -> None:
    """Images embedded (nothing linked by path), the held-out headline, one unit per panel, equal curves drawn
    once, gate failures as the run's totals, the whole run's steps on every axis, the agent's plays shown."""
    from spade_jax.report.plots import BAR_PANELS, Y_RANGES, diagnostic_lines

    for steps in (4, 400):
        run_dir = tmp_path / str(steps)
        logger = MetricsLogger(run_dir, tensorboard=False)
        for s in range(1, steps + 1):
            row = {
                "rollout/win_rate_no_hint": 0.2,
                "train/loss": 0.01 * s,
                "train/pg_loss": 0.01 * s,
                "perf/slot_utilisation": 0.6,
                "perf/selfplay_tokens_per_s": 150.0,
                "mem/host_rss_gb": 6.0,
            }
            if s == 1:
                row |= {"design/failed_static": 2.0, "design/failed_step": 1.0, "design/valid_frac": 0.5}
            if s == 3:
                row["design/failed_static"] = 1.0
            if s == steps:
                row |= {"eval/win_rate": 0.375, "eval/win_rate_grid_maze": 0.5}
            logger.log(s, row)
        logger.close()
        (run_dir / "transcripts.jsonl").write_text(json.dumps({
            "step": 1, "env_id": "seed-nim_duel", "condition": "hint", "return": 1.0, "won": True, "turns": 2,
            "end": "terminated", "text": "<|im_start|>user\nTake 1-3 stones <b>now</b><|im_end|>"}) + "\n")  # fmt: skip
        envs = [{"id": "seed-nim_duel", "name": "nim_duel", "code": "x = 1  " * 400, "verdict_valid": True,
                 "origin": "seed", "kind": "game"}]  # fmt: skip
        page = write_report(run_dir, envs=envs).read_text()
        assert 'src="plot_' not in page and page.count('src="data:image/png;base64,') >= 6
        assert "38%" in page and f"held-out win rate, unhinted, at step {steps}" in page and "grid_maze" in page
        assert "Agent with the hint" in page and "&lt;b&gt;now&lt;/b&gt;" in page  # escaped, shown whole
        assert ("x = 1  " * 400).strip() in page  # the whole code, wrapped, not cut
        rows = read_metrics(run_dir / "metrics.jsonl")
        diag = diagnostic_lines(rows)
        assert [line.label for line in diag["Learner loss"]] == ["train/loss = train/pg_loss"]
        assert "perf/slot_utilisation" not in [line.label for line in diag["Throughput (tokens/s)"]]
        assert [line.label for line in diag["Utilisation (share)"]] == ["perf/slot_utilisation"]
        bars = next(t for t in BAR_PANELS)
        assert {line.label: sum(line.values) for line in diag[bars]} == {"design/failed_static": 3.0,
                                                                        "design/failed_step": 1.0}  # fmt: skip
        assert Y_RANGES["Held-out win rate (unhinted)"] == (0.0, 1.0) and Y_RANGES["Regret (mean)"] == (-1.0, 1.0)
    (tmp_path / "none").mkdir()
    assert "not measured in this run" in write_report(tmp_path / "none", envs=[]).read_text()
