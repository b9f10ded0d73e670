"""`spade-jax export-envs`: a run's archive in the paper's released-pool layout, a manifest, a table `datasets`
loads, and checksums `sha256sum -c` accepts; seeds and pool environments only on request; bad input is one line
and exit 2 with nothing written; the run directory is left as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from spade_jax.cli import main
from spade_jax.envs.seeds import SEEDS_DIR
from spade_jax.selfplay.memory import EnvRecord, Memory

GYM_SOURCE = '''"""Guess the hidden digit; plain Gym-style class, no base."""

import random


class DigitGuessEnv:
    def __init__(self, max_turns: int = 5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.target, self.turns = self.rng.randint(0, 9), 0
        return "Guess a digit 0-9 as \\\\boxed{d}.", {}

    def step(self, action):
        self.turns += 1
        won = action.strip() == f"\\\\boxed{{{self.target}}}"
        done = won or self.turns >= self.max_turns
        return ("correct" if won else "wrong"), float(won), done, False, {}
'''
FIELDS = ("name", "kind", "skill", "origin", "status", "step", "parent_id", "mutation_of", "win_rate_hint",
          "win_rate_no_hint", "return_hint", "return_no_hint", "regret", "designer_reward", "plays")  # fmt: skip


def _seed(name: str) -> str:
    return (SEEDS_DIR / f"{name}.py").read_text(encoding="utf-8")


def _rec(rid: str, code: str, step: int, **kw) -> EnvRecord:
    base = dict(kind="game", skill="strategic planning", name=rid, origin="designer", status="valid",
                verdict_valid=True, verdict_gate="novelty", verdict_reason="ok", created=1.0)  # fmt: skip
    return EnvRecord(id=rid, code=code, step=step, **{**base, **kw})


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory holding only memory.sqlite (no config.json: the export does not need one)."""
    run = tmp_path / "run"
    mem = Memory(run / "memory.sqlite")
    for rec in [
        _rec("seed-nim_duel", _seed("nim_duel"), -1, origin="seed", verdict_gate="seed"),
        _rec("pool-grid", _seed("grid_maze"), 1, origin="pool", skill="spatial reasoning", verdict_gate="pool"),
        _rec("d2a", _seed("secret_word"), 2, skill="Logical deduction / puzzles!", win_rate_hint=0.75,
             win_rate_no_hint=0.25, return_hint=0.75, return_no_hint=0.25, regret=0.5, designer_reward=0.5, plays=16),
        _rec("d2bad", "class Broken:\n", 2, status="invalid", verdict_valid=False, verdict_gate="load",
             verdict_reason="no class"),
        _rec("d2m", _seed("code_breaker"), 2, origin="mutation", mutation_of="d2a", parent_id="d2bad"),
        _rec("d3gym", GYM_SOURCE, 3, skill="", name="digit_guess"),
        _rec("d3old", _seed("light_switches"), 3, skill="pattern recognition"),
    ]:  # fmt: skip
        mem.add(rec)
    mem.retire("d3old")
    mem.close()
    return run


def _snapshot(run: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.iterdir())}


def _export(run: Path, out: Path, *extra: str) -> int:
    return main(["export-envs", "--run-dir", str(run), "--out", str(out), *extra])


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_export_layout_manifest_and_checksums(run_dir: Path, tmp_path: Path, capsys) -> None:
    before = _snapshot(run_dir)
    out = tmp_path / "out"
    assert _export(run_dir, out) == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and "exported 3 environment(s)" in summary[0] and str(out) in summary[0]
    assert _snapshot(run_dir) == before  # read only: no migration, no journal left behind

    names = ["game_00002_000_logical_deduction_puzzles.py", "game_00002_001_strategic_planning.py",
             "game_00003_000_game.py", "game_00003_001_pattern_recognition.py"]  # fmt: skip
    # the default exports the archive (status valid) of generated origins: no seed, pool, invalid or retired row
    assert sorted(p.name for p in (out / "games").iterdir()) == names[:3]
    shutil.copy(run_dir / "memory.sqlite", tmp_path / "copy.sqlite")  # expected rows: from a copy (run untouched)
    mem = Memory(tmp_path / "copy.sqlite")
    expected = {r.id: r for r in mem.attempts()}
    mem.close()

    manifest = _rows(out / "manifest.jsonl")
    assert [m["file"] for m in manifest] == [f"games/{n}" for n in names[:3]]
    assert [m["id"] for m in manifest] == ["d2a", "d2m", "d3gym"]
    for m in manifest:
        rec = expected[m["id"]]
        assert (out / m["file"]).read_text(encoding="utf-8") == rec.code
        assert m["sha256"] == hashlib.sha256((out / m["file"]).read_bytes()).hexdigest()
        for key in FIELDS:
            assert m[key] == getattr(rec, key), key
        assert m["verdict"] == {"valid": True, "gate": rec.verdict_gate, "reason": rec.verdict_reason}
    assert [m["contract"] for m in manifest] == ["ours", "ours", "gym"]
    assert manifest[1]["mutation_of"] == "d2a" and manifest[1]["parent_id"] == "d2bad"
    assert manifest[0]["regret"] == 0.5 and manifest[0]["plays"] == 16

    envs = _rows(out / "envs.jsonl")
    assert [{k: v for k, v in e.items() if k != "source"} for e in envs] == manifest
    for e in envs:
        assert e["source"] == (out / e["file"]).read_text(encoding="utf-8")

    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum (coreutils) is not installed")
    listed = [line.split("  ", 1)[1] for line in (out / "checksums.sha256").read_text().splitlines()]
    assert sorted(listed) == sorted(str(p.relative_to(out)) for p in out.rglob("*.*") if p.name != "checksums.sha256")
    check = subprocess.run(["sha256sum", "-c", "checksums.sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_parquet_holds_the_same_rows(run_dir: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "out"
    assert _export(run_dir, out) == 0
    assert pq.read_table(out / "envs.parquet").to_pylist() == _rows(out / "envs.jsonl")


def test_the_export_loads_back_as_a_pool(run_dir: Path, tmp_path: Path) -> None:
    from spade_jax.envs.pools import load_pool

    out = tmp_path / "out"
    assert _export(run_dir, out) == 0
    specs = load_pool(str(out))  # checksums verified, manifest rows read
    manifest = _rows(out / "manifest.jsonl")
    assert [(s.kind, s.skill, s.contract) for s in specs] == [(m["kind"], m["skill"], m["contract"]) for m in manifest]
    assert [s.source for s in specs] == [(out / m["file"]).read_text(encoding="utf-8") for m in manifest]


def test_all_origins_and_status_filter(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "all"
    assert _export(run_dir, out, "--all-origins") == 0
    files = [m["file"] for m in _rows(out / "manifest.jsonl")]
    assert files == ["games/game_00000_000_strategic_planning.py", "games/game_00001_000_spatial_reasoning.py",
                     "games/game_00002_000_logical_deduction_puzzles.py", "games/game_00002_001_strategic_planning.py",
                     "games/game_00003_000_game.py"]  # fmt: skip
    assert (out / files[0]).read_text(encoding="utf-8") == _seed("nim_duel")

    out = tmp_path / "retired"
    assert _export(run_dir, out, "--status", "valid,retired") == 0
    manifest = _rows(out / "manifest.jsonl")
    assert [(m["id"], m["status"]) for m in manifest][-2:] == [("d3gym", "valid"), ("d3old", "retired")]
    assert manifest[-1]["file"] == "games/game_00003_001_pattern_recognition.py"


def test_empty_out_directory_is_used_and_a_full_one_refused(run_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert _export(run_dir, out) == 0
    capsys.readouterr()
    assert _export(run_dir, out) == 2
    assert "is not an empty directory" in _one_line_error(capsys)
    assert len(list((out / "games").iterdir())) == 3  # the first export is left as it was


@pytest.mark.parametrize("problem", ["missing", "damaged", "no_table"])
def test_unusable_memory_is_one_line_and_exit_2(problem: str, run_dir: Path, tmp_path: Path, capsys) -> None:
    path = run_dir / "memory.sqlite"
    if problem == "missing":
        path.unlink()
    elif problem == "damaged":
        path.write_bytes(b"this is not a database" * 100)
    else:
        path.unlink()
        with closing(sqlite3.connect(path)) as db:
            db.execute("CREATE TABLE t (x)")
    out = tmp_path / "out"
    assert _export(run_dir, out) == 2
    line = _one_line_error(capsys)
    assert line.startswith("spade-jax export-envs: error:")
    assert {"missing": "has no memory.sqlite", "damaged": "is unusable", "no_table": "no envs table"}[problem] in line
    assert not out.exists() and not list(tmp_path.glob(".out.partial-*"))


def test_unknown_status_is_one_line(run_dir: Path, tmp_path: Path, capsys) -> None:
    assert _export(run_dir, tmp_path / "out", "--status", "valid,gone") == 2
    assert "unknown status gone" in _one_line_error(capsys)
    assert not (tmp_path / "out").exists()
