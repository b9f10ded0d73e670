"""The self-play loop on two processes (two CPU devices each) joined into one JAX job, as `launch.local` starts
them: the work is divided (each process plays its block of the episodes in its own sandboxes), every process
ends each step with the same results, the learner spans both processes, process 0 alone writes the run
directory, and a job killed after its second checkpoint and resumed gives the same per-step metrics as a job
that was never killed. (The division of work changes which rows share a sampler call, so the reference is a
two-process job, not a one-process one.)

The trained job plays a fixed pool holding one environment whose reward a random policy gets half the time,
so every step really trains; a second job runs the designer cycle itself (designs, gates, hints, audits).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from players import COIN_ENV
from run_metrics import assert_same_metrics, metrics, pool_overrides, rows

pytestmark = pytest.mark.slow

PROCESSES, DEVICES = 2, 2
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(run_dir: Path | str, *args: str, logs: Path | None = None, env: dict | None = None) -> list:
    """The job's processes, each in a session of its own (killed with its sandbox workers); their output goes
    to `<logs>-<start|resume>-<i>.log` (default: beside the run directory)."""
    port = _free_port()
    logs = logs or Path(run_dir)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPADE_")} | (env or {})
    cmd = [sys.executable, "-m", "spade_jax.cli", "selfplay", "--preset", "tiny", "--run-dir", str(run_dir), *args]
    procs = []
    for i in range(PROCESSES):
        penv = dict(base, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}",
                   SPADE_COORDINATOR=f"127.0.0.1:{port}", SPADE_NUM_PROCESSES=str(PROCESSES),
                   SPADE_PROCESS_ID=str(i), SPADE_SHARED_RUN_DIR="1", SPADE_JAX_COMPILE_CACHE="off")  # fmt: skip
        log = logs.parent / f"{logs.name}-{'resume' if '--resume' in args else 'start'}-{i}.log"
        procs.append(subprocess.Popen(cmd, env=penv, cwd=ROOT, start_new_session=True, stdout=log.open("w"),
                                      stderr=subprocess.STDOUT))  # fmt: skip
    return procs


def _finish(procs: list[subprocess.Popen], logs: Path) -> None:
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        _kill(procs)
    logs = "".join(p.read_text()[-2000:] for p in sorted(logs.parent.glob(f"{logs.name}-*.log")))
    assert codes == [0] * PROCESSES, f"exit codes {codes}:\n{logs}"


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture(scope="module")
def pool_args(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("pool")
    (d / "parity_game.py").write_text(COIN_ENV)
    return pool_overrides(d)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, pool_args: list[str]) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "clean"
    _finish(_start(run_dir, *pool_args), run_dir)
    return run_dir


def test_two_processes_divide_the_plays_and_train_together(clean_run: Path) -> None:
    step_rows = metrics(clean_run)
    assert [r["step"] for r in step_rows] == [1, 2, 3]
    trained = [r for r in step_rows if r["train/skipped"] == 0.0]
    assert trained, "the pool's reward varies: some step should train"
    for r in trained:  # the sampler's copy on each process has the learner's weights: the same log-probs
        assert r["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    for r in step_rows:  # 3 plays x 2 conditions, or 3 unhinted: each process played its half
        lo, hi = r["rollout/host_episodes_min"], r["rollout/host_episodes_max"]
        assert lo >= 1 and hi - lo <= 1 and lo + hi == r["rollout/episodes"]
    assert (clean_run / "report.html").exists() and (clean_run / "memory.sqlite").exists()
    assert not list(clean_run.glob("*.host1*")), "only process 0 writes the run directory"


def test_killed_after_two_steps_and_resumed_matches_the_job_never_killed(tmp_path: Path, pool_args: list[str],
                                                                         clean_run: Path) -> None:  # fmt: skip
    crashed = tmp_path / "crashed"
    procs = _start(crashed, *pool_args)
    deadline = time.time() + 900
    while not (crashed / "checkpoints" / "2").is_dir() and time.time() < deadline and procs[0].poll() is None:
        time.sleep(0.2)
    assert all(p.poll() is None for p in procs), "the job ended before it could be killed"
    _kill(procs)  # both processes and their sandbox workers, in step 3
    assert len(metrics(crashed)) < 3

    _finish(_start(crashed, *pool_args, "--resume"), crashed)
    assert_same_metrics(metrics(clean_run), metrics(crashed))


def test_a_gs_run_dir_of_two_processes_is_killed_and_resumed_from_the_bucket(tmp_path: Path, pool_args: list[str],
                                                                              clean_run: Path) -> None:  # fmt: skip
    """The same job with `--run-dir gs://...` (fake-gcs-server on loopback): checkpoints from both processes in
    the bucket, the files from process 0's staging copy; resumed with empty staging folders, the same metrics."""
    from gcs_emulator import emulator, environ

    url = "gs://bkt/runs/multi"
    with emulator("bkt") as gcs, environ(gcs):
        import fsspec

        fs = fsspec.filesystem("gs")
        procs = _start(url, *pool_args, logs=tmp_path / "gs", env={**gcs, "SPADE_JAX_STAGING": str(tmp_path / "a")})
        committed = f"{url}/checkpoints/2/commit_success.txt"
        deadline = time.time() + 900
        while time.time() < deadline and procs[0].poll() is None:
            fs.invalidate_cache()
            if fs.exists(committed):
                break
            time.sleep(0.2)
        assert all(p.poll() is None for p in procs), "the job ended before it could be killed"
        _kill(procs)
        fs.invalidate_cache()
        assert fs.exists(committed) and not fs.exists(f"{url}/report.html")

        env = {**gcs, "SPADE_JAX_STAGING": str(tmp_path / "b")}  # another machine's view: nothing staged
        _finish(_start(url, *pool_args, "--resume", logs=tmp_path / "gs", env=env), tmp_path / "gs")
        fs.invalidate_cache()
        assert_same_metrics(metrics(clean_run), rows(fs.cat_file(f"{url}/metrics.jsonl").decode()))
        assert fs.exists(f"{url}/report.html") and fs.exists(f"{url}/memory.sqlite")
        assert not fs.exists(f"{url}.host1"), "process 1 pushes nothing"


def test_the_designer_cycle_runs_on_two_processes(tmp_path: Path) -> None:
    run_dir = tmp_path / "designed"
    _finish(_start(run_dir, "loop.steps=2", "loop.eval_every=2", "selfplay.envs_per_step=2"), run_dir)
    step_rows = metrics(run_dir)
    assert [r["step"] for r in step_rows] == [1, 2]
    first = step_rows[0]
    assert first["design/targets"] == 2 and first["design/attempts"] >= 2  # one design per process
    assert first["rollout/host_episodes_min"] >= 1  # the environments' plays were divided
    raw = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert "time/eval" in raw[1]  # the held-out plays ran too (divided like the others)
