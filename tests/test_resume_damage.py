"""Resume from a damaged run directory: every case resumes or stops with one line, and loses nothing.

One tiny run (3 steps, checkpoints 2 and 3 kept) is trained once per module; each test damages its own copy
and resumes it as a user would (`spade-jax selfplay --resume`). Each subprocess gets a TMPDIR of its own, so
the tests can also check that no sandbox temp dir is left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from players import COIN_ENV

VOLATILE = (
    "time/",
    "perf/",
    "mem/",
    "rollout/wall_s",
    "rollout/policy_share",
    "rollout/pool_share",
    "rollout/episodes_per_s",
)
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def _cmd(run_dir: Path, pool_dir: Path, *overrides: str, resume: bool = False) -> list[str]:
    return [
        sys.executable, "-m", "spade_jax.cli", "selfplay", "--preset", "tiny", "--run-dir", str(run_dir),
        *(["--resume"] if resume else []), f"loop.pool={pool_dir}", "loop.steps=3", "loop.eval_plays=0",
        "loop.pool_envs_per_step=1", "selfplay.plays_per_condition=3", "learner.lr=3e-3", *overrides,
    ]  # fmt: skip


def _run(cmd: list[str], tmp: Path) -> subprocess.CompletedProcess:
    tmp.mkdir(exist_ok=True)
    return subprocess.run(cmd, env={**ENV, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=600)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE)}


def _sandbox_dirs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("spade-sandbox-*"))


def _one_line(proc: subprocess.CompletedProcess, pattern: str) -> str:
    """The single stderr line matching `pattern`; no traceback anywhere."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if re.search(pattern, line)]
    assert len(lines) == 1, f"want one line matching {pattern!r}:\n{proc.stderr[-3000:]}"
    return lines[0]


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pool")
    (d / "parity_game.py").write_text(COIN_ENV)
    return d


@pytest.fixture(scope="module")
def trained(tmp_path_factory, pool_dir: Path) -> Path:
    """A finished 3-step run: metrics rows 1-3, checkpoints 2 and 3, the memory file."""
    run_dir = tmp_path_factory.mktemp("runs") / "base"
    proc = _run(_cmd(run_dir, pool_dir), tmp_path_factory.mktemp("tmp"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()) == [2, 3]
    return run_dir


@pytest.fixture
def run_dir(tmp_path: Path, trained: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


@pytest.mark.slow
def test_truncated_newest_checkpoint_resumes_from_the_older_one(run_dir: Path, pool_dir: Path, tmp_path: Path):
    before = _rows(run_dir)
    data = max((p for p in (run_dir / "checkpoints" / "3").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with data.open("r+b") as f:
        f.truncate(data.stat().st_size // 2)

    proc = _run(_cmd(run_dir, pool_dir, resume=True), tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _one_line(proc, r"resuming from checkpoint")
    assert "resuming from checkpoint 2" in line and "checkpoint 3 does not restore" in line
    assert list((run_dir / "damaged").glob("checkpoint-3-*")), "the damaged step is kept aside"
    after = _rows(run_dir)
    assert [r["step"] for r in after] == [1, 2, 3]
    for want, got in zip(before, after):  # step 3 redone from checkpoint 2: the same numbers
        assert _stable(got).keys() == _stable(want).keys()
        for key, value in _stable(want).items():
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-7), f"step {want['step']}: {key}"
    assert (run_dir / "checkpoints" / "3").is_dir(), "step 3 saved anew"
    assert _sandbox_dirs(tmp_path / "tmp") == []


@pytest.mark.slow
def test_deleted_meta_resumes_from_another_step_or_stops_with_one_line(run_dir: Path, pool_dir: Path, tmp_path: Path):
    shutil.rmtree(run_dir / "checkpoints" / "3" / "meta")
    proc = _run(_cmd(run_dir, pool_dir, resume=True), tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _one_line(proc, r"resuming from checkpoint")
    assert "resuming from checkpoint 2" in line and "checkpoint 3 does not restore" in line
    assert [r["step"] for r in _rows(run_dir)] == [1, 2, 3]

    for step in (2, 3):  # no step left that restores: one line, exit 2, nothing changed
        shutil.rmtree(run_dir / "checkpoints" / str(step) / "meta")
    rows = (run_dir / "metrics.jsonl").read_text()
    proc = _run(_cmd(run_dir, pool_dir, resume=True), tmp_path / "tmp")
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_line(proc, r"error:")
    assert "no checkpoint restores" in line and "checkpoint 3" in line and "checkpoint 2" in line
    assert (run_dir / "metrics.jsonl").read_text() == rows
    assert _sandbox_dirs(tmp_path / "tmp") == []


def _memory_rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT rowid, * FROM envs ORDER BY rowid").fetchall()
    finally:
        db.close()


@pytest.mark.slow
def test_corrupted_memory_is_rebuilt_from_the_checkpoint_copy(run_dir: Path, pool_dir: Path, tmp_path: Path):
    memory = run_dir / "memory.sqlite"
    want = _memory_rows(memory)
    assert want, "the run recorded its pool environment"
    with memory.open("r+b") as f:
        f.write(b"this is not a database" * 8)

    proc = _run(_cmd(run_dir, pool_dir, resume=True), tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _one_line(proc, r"memory\.sqlite is damaged")
    assert "rebuilt from the copy in checkpoint 3" in line
    assert list((run_dir / "damaged").glob("memory.sqlite-*")), "the damaged file is kept aside"
    assert _memory_rows(memory) == want, "every row back, as checkpoint 3 saw it"
    assert _sandbox_dirs(tmp_path / "tmp") == []


@pytest.mark.slow
def test_torn_metrics_line_is_repaired_and_no_row_is_lost(run_dir: Path, pool_dir: Path, tmp_path: Path):
    path = run_dir / "metrics.jsonl"
    before = _rows(run_dir)
    text = path.read_text()
    last = text.splitlines()[-1]
    path.write_text(text[: len(text) - 1 - len(last) // 2])  # the step-3 row cut mid-line

    proc = _run(_cmd(run_dir, pool_dir, resume=True), tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = _one_line(proc, r"torn line")
    assert "step 3's row was put back from the checkpoint" in line
    assert _rows(run_dir) == before


@pytest.mark.slow
def test_sigterm_shuts_down_cleanly(tmp_path: Path, pool_dir: Path):
    """SIGTERM mid-run (once checkpoint 1 exists): exit 143, every sandbox closed and its temp dir removed."""
    run_dir, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    log = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        _cmd(run_dir, pool_dir, "loop.steps=1000"), env={**ENV, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL,
        stderr=log, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 600  # a generous bound, never reached on a working machine
        while not (run_dir / "checkpoints" / "1").is_dir() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before the signal"
        assert _sandbox_dirs(tmp), "the run's sandboxes are up"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    stderr = (tmp_path / "stderr").read_text()
    assert code == 143, stderr[-3000:]
    assert "Traceback" not in stderr and "terminated (SIGTERM)" in stderr, stderr[-3000:]
    assert _sandbox_dirs(tmp) == [], "sandbox temp dirs removed"


def test_stale_sandbox_dir_of_a_dead_run_is_removed_at_the_next_start(tmp_path: Path, monkeypatch):
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "600"])
    try:
        stale = tmp_path / f"spade-sandbox-process-{dead.pid}-abc123_x"
        (stale / "tmp-1" / "locked").mkdir(parents=True)
        (stale / "tmp-1" / "locked" / "file").write_text("left by an episode")
        os.chmod(stale / "tmp-1" / "locked", 0)
        (stale / "owner.lock").write_text("")
        alive = tmp_path / f"spade-sandbox-process-{live.pid}-def456_y"
        alive.mkdir()
        old_style = tmp_path / "spade-sandbox-process-k2j4h5g6"  # no owner pid recorded: not ours to judge
        old_style.mkdir()

        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        pool = HostPool(1, SandboxConfig(level="process"))
        try:
            pool.warm_up(1)  # a worker running from the pool's own temp dir
            assert pool.stats["workers_started"] == 1
        finally:
            pool.close()
        assert not stale.exists(), "the dead run's dir is removed"
        assert alive.is_dir() and old_style.is_dir(), "a live run's dir, and one without an owner, are kept"
        assert _sandbox_dirs(tmp_path) == sorted([alive.name, old_style.name]), "the pool's own dir is removed"
    finally:
        live.kill()
        live.wait()
