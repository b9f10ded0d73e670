"""Bad run configuration gets one clear line naming the problem, and exit code 2, before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spade_jax.config.overrides import ConfigError
from spade_jax.config.run import RUN_PRESETS, RunConfig, load_run_config


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--preset", "demo", "loop.stepz=3"], "unknown config key 'loop.stepz'"),
        (["--preset", "demo", "learner.lr=fast"], "learner.lr='fast': expected float"),
        (["--preset", "nope"], "unknown run preset 'nope'"),
        (["--config", "/nonexistent/config.json"], "config file not found"),
        (["--preset", "demo", "learner.schedule=zigzag"], "schedule='zigzag'"),
        (["--preset", "demo", "loop"], "is not of the form key=value"),
    ],
)
def test_bad_config_is_one_line(args: list[str], expected: str, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "spade_jax.cli", "selfplay", "--run-dir", str(tmp_path / "r"), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert not (tmp_path / "r").exists()  # nothing was started


def test_a_multi_process_job_without_a_shared_run_dir_is_refused_before_any_work(tmp_path) -> None:
    """A local run directory not declared shared (SPADE_SHARED_RUN_DIR, set by launch.local and launch.slurm) is
    refused in one line at once; JAX is never asked to wait for the peer (no coordinator listens on the port)."""
    env = {"SPADE_COORDINATOR": "127.0.0.1:9", "SPADE_NUM_PROCESSES": "2", "SPADE_PROCESS_ID": "1"}
    base = {k: v for k, v in os.environ.items() if k != "SPADE_SHARED_RUN_DIR"}
    proc = subprocess.run(
        [sys.executable, "-m", "spade_jax.cli", "selfplay", "--preset", "tiny", "--run-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, env={**base, **env},
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a shared run directory" in lines[0], proc.stderr
    assert not (tmp_path / "r").exists()


def test_presets_round_trip_through_json() -> None:
    for name in RUN_PRESETS:
        cfg = load_run_config(name)
        assert RunConfig.from_json(cfg.to_json()) == cfg


def test_overrides_reach_nested_sections() -> None:
    cfg = load_run_config("demo", ["selfplay.rollout.max_turns=7", "loop.held_out=grid_maze", "mesh=data=1"])
    assert cfg.selfplay.rollout.max_turns == 7
    assert cfg.loop.held_out == ("grid_maze",)
    assert cfg.mesh == "data=1"
    with pytest.raises(ConfigError, match="selfplay.rollout is a section"):
        load_run_config("demo", ["selfplay.rollout=3"])


def test_a_resume_warning_names_the_keys_that_changed() -> None:
    from spade_jax.run.loop import _changed

    saved = load_run_config("demo")
    resumed = load_run_config("demo", ["loop.steps=8", "learner.lr=0", "selfplay.rollout.max_turns=7"])
    assert _changed(saved.to_json(), resumed) == "learner.lr, loop.steps, selfplay.rollout.max_turns"
    assert _changed(saved.to_json(), saved) == ""
    assert _changed("{not json", resumed) == "a file that is not JSON"
