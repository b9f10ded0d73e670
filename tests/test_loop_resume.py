"""The whole loop on a tiny model, and exact resume: `kill -9` mid-run, `--resume`, same metrics as a clean run.

Uses a fixed pool holding one environment whose reward a random policy gets half the time, so every step
really trains (the metrics then depend on the params, the optimizer state and every RNG being restored).
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

pytestmark = pytest.mark.slow


VOLATILE = ("time/", "perf/", "rollout/wall_s", "rollout/policy_share", "rollout/pool_share", "rollout/episodes_per_s")


def _cmd(run_dir: Path, pool_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "spade_jax.cli", "selfplay", "--preset", "tiny", "--run-dir", str(run_dir), *extra,
        f"loop.pool={pool_dir}", "loop.steps=3", "loop.eval_every=0", "loop.pool_envs_per_step=1",
        "selfplay.plays_per_condition=3", "learner.lr=3e-3",
    ]  # fmt: skip


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


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
    reference = _metrics(clean_run)
    assert [r["step"] for r in reference] == [1, 2, 3]
    assert all(r["train/skipped"] == 0.0 for r in reference), "every step should train (reward varies)"

    proc = subprocess.Popen(
        _cmd(crashed, pool_dir), env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 900
    while not (crashed / "checkpoints" / "1").is_dir() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its sandbox workers, mid step 2
    proc.wait()
    assert len(_metrics(crashed)) < 3

    subprocess.run(_cmd(crashed, pool_dir, "--resume"), check=True, env=env, timeout=900, capture_output=True)
    resumed = _metrics(crashed)
    assert [r["step"] for r in resumed] == [1, 2, 3]
    for want, got in zip(reference, resumed):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), f"step {want['step']}: {key}"
    assert (crashed / "report.html").exists()


def test_export_hf_loads_in_transformers_with_the_trained_weights(tmp_path: Path, clean_run: Path) -> None:
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx
    from transformers import AutoModelForCausalLM

    from spade_jax.checkpoint import Checkpointer
    from spade_jax.model.loading import load_model

    out = tmp_path / "hf"
    subprocess.run(
        [sys.executable, "-m", "spade_jax.cli", "export-hf", "--run-dir", str(clean_run), "--out", str(out)],
        check=True, env=ENV, timeout=600, capture_output=True,
    )  # fmt: skip
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
