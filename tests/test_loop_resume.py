"""The whole loop on a tiny model, and exact resume: `kill -9` mid-run, `--resume`, same metrics as a clean run.

Uses a fixed pool holding one environment whose reward a random policy gets half the time, so the steps around
the kill train (the metrics then depend on the params, the optimizer state and every RNG being restored).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from players import COIN_ENV
from run_metrics import assert_same_metrics, metrics, pool_overrides, rows

pytestmark = pytest.mark.slow


def _cmd(run_dir: Path | str, pool_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "spade_jax.cli", "selfplay", "--preset", "tiny", "--run-dir", str(run_dir), *extra,
            *pool_overrides(pool_dir)]  # fmt: skip


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pool")
    (d / "parity_game.py").write_text(COIN_ENV)
    return d


ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, pool_dir: Path) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "clean"
    subprocess.run(_cmd(run_dir, pool_dir), check=True, env=ENV, timeout=900, capture_output=True)
    return run_dir


def test_kill_and_resume_matches_clean_run(tmp_path: Path, pool_dir: Path, clean_run: Path) -> None:
    crashed = tmp_path / "crashed"
    env = ENV
    reference = metrics(clean_run)
    assert [r["step"] for r in reference] == [1, 2, 3]
    # step 1 trains (the checkpoint holds an update and Adam's moments), and so does the replayed step 3 (its
    # metrics then depend on the restored parameters, optimizer state and streams); step 2 may draw an all-won group
    assert reference[0]["train/skipped"] == 0.0 and reference[-1]["train/skipped"] == 0.0, "steps 1 and 3 train"
    raw = [json.loads(line) for line in (clean_run / "metrics.jsonl").read_text().splitlines()]
    assert raw[0]["time/compile"] > 0, "step 1 compiles its programs, and says how long that took"
    assert all(r["time/compile"] >= 0 for r in raw)

    proc = subprocess.Popen(
        _cmd(crashed, pool_dir), env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 900
    while not (crashed / "checkpoints" / "1").is_dir() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its sandbox workers, mid step 2
    proc.wait()
    assert len(metrics(crashed)) < 3

    subprocess.run(_cmd(crashed, pool_dir, "--resume"), check=True, env=env, timeout=900, capture_output=True)
    assert_same_metrics(reference, metrics(crashed))
    assert (crashed / "report.html").exists()


def test_a_gs_run_dir_is_killed_and_resumed_from_the_bucket(tmp_path: Path, pool_dir: Path, clean_run: Path) -> None:
    """`--run-dir gs://...` against a local GCS emulator (fake-gcs-server, loopback): checkpoints written to the
    bucket by Orbax/TensorStore, the other files pushed from a staging copy. Killed after checkpoint 1 is in the
    bucket, resumed from another machine's view (an empty staging folder, so everything is read back from the
    bucket), it gives the clean local run's metrics; report, memory and TensorBoard land in the bucket, and
    `export-hf` reads the bucket's checkpoint."""
    from gcs_emulator import emulator, environ

    url = "gs://bkt/runs/crashed"
    with emulator("bkt") as gcs, environ(gcs):
        import fsspec

        fs = fsspec.filesystem("gs")

        def env(stage: str) -> dict[str, str]:
            return {**ENV, **gcs, "SPADE_JAX_STAGING": str(tmp_path / stage)}

        proc = subprocess.Popen(_cmd(url, pool_dir), env=env("host-a"), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        committed = f"{url}/checkpoints/1/commit_success.txt"
        deadline = time.time() + 900
        while time.time() < deadline and proc.poll() is None:
            fs.invalidate_cache()
            if fs.exists(committed):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        fs.invalidate_cache()
        assert fs.exists(committed) and not fs.exists(f"{url}/report.html")

        done = subprocess.run(_cmd(url, pool_dir, "--resume"), check=True, env=env("host-b"), timeout=900,
                              capture_output=True, text=True)  # fmt: skip
        assert "restoring checkpoint" in done.stderr and "step 1:" not in done.stderr, done.stderr[-2000:]
        assert "damaged" not in done.stderr, done.stderr[-2000:]  # memory.sqlite came back from the bucket
        fs.invalidate_cache()
        assert_same_metrics(metrics(clean_run), rows(fs.cat_file(f"{url}/metrics.jsonl").decode()))
        for name in ("report.html", "memory.sqlite", "config.json", "gate_key"):
            assert fs.exists(f"{url}/{name}"), name
        assert fs.ls(f"{url}/tb"), "no TensorBoard events in the bucket"
        assert fs.cat_file(f"{url}/memory.sqlite")[:16] == b"SQLite format 3\x00"

        out = tmp_path / "hf"
        subprocess.run([sys.executable, "-m", "spade_jax.cli", "export-hf", "--run-dir", url, "--out", str(out)],
                       check=True, env=env("host-c"), timeout=600, capture_output=True)  # fmt: skip
        assert (out / "config.json").exists()


def test_export_hf_loads_in_transformers_with_the_trained_weights(tmp_path: Path, clean_run: Path) -> None:
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx
    from transformers import AutoModelForCausalLM

    from spade_jax.model.loading import load_model
    from spade_jax.rundir.checkpoints import Checkpointer

    out = tmp_path / "hf"
    subprocess.run(
        [sys.executable, "-m", "spade_jax.cli", "export-hf", "--run-dir", str(clean_run), "--out", str(out),
         "--dtype", "float32"],
        check=True, env=ENV, timeout=600, capture_output=True,
    )  # fmt: skip
    card = (out / "README.md").read_text()
    assert "tiny-smollm" in card and "step 3" in card and "`learner.lr`" in card
    _, model, tokenizer = load_model("tiny-smollm")
    init = np.asarray(model.embed_tokens.embedding[...]).copy()
    ckpt = Checkpointer(clean_run / "checkpoints", async_save=False)
    trees, _ = ckpt.restore(None, {"params": nnx.state(model, nnx.Param)})
    ckpt.close()
    nnx.update(model, trees["params"])
    assert not np.allclose(init, np.asarray(model.embed_tokens.embedding[...])), "training changed no weight"

    ids = tokenizer.encode("Reply with \\boxed{word}. You win if the word is even.")
    ours = np.asarray(model(jnp.asarray([ids]))[0][0])
    hf = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(ours - theirs).max() <= 1e-4
