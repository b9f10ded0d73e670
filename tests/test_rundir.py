"""Run directories on gs:// (spade_jax/rundir/paths.py, rundir/checkpoints.py) against a local GCS emulator
(fake-gcs-server on loopback, tests/gcs_emulator.py): the staging copy's push and pull, an unreachable bucket, and Orbax
checkpoints written to, restored from and set aside in the bucket."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from gcs_emulator import emulator, environ

from spade_jax.rundir.paths import RunDirError, open_run_dir, read_text, staging_dir


@pytest.fixture(scope="module")
def gcs():
    with emulator("bkt") as values, environ(values):
        yield values


@pytest.fixture
def staging(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("SPADE_JAX_STAGING", str(tmp_path / "staging"))
    return tmp_path / "staging"


def _fs():
    import fsspec

    fs = fsspec.filesystem("gs")
    fs.invalidate_cache()
    return fs


def test_push_sends_what_changed_and_a_fresh_staging_copy_reads_it_back(gcs, staging: Path) -> None:
    url = "gs://bkt/runs/a"
    rd = open_run_dir(url)
    assert rd.path == staging_dir(url) == staging / "bkt/runs/a" and rd.checkpoints == f"{url}/checkpoints"
    (rd.path / "metrics.jsonl").write_text('{"step": 1}\n')
    (rd.path / "tb").mkdir()
    (rd.path / "tb" / "events.1").write_bytes(b"\x00\x01")
    db = sqlite3.connect(rd.path / "memory.sqlite")  # open, as the run's memory is while it pushes
    db.execute("create table t (x)")
    db.execute("insert into t values (7)")
    db.commit()
    assert rd.push() == 3
    assert rd.push() == 0  # nothing changed: nothing sent again
    (rd.path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert rd.push() == 1
    db.close()
    assert read_text(f"{url}/metrics.jsonl") == '{"step": 1}\n{"step": 2}\n'

    again = open_run_dir(url)  # another host, or a resume: the staging folder is emptied and filled anew
    assert (again.path / "tb" / "events.1").read_bytes() == b"\x00\x01"
    assert sqlite3.connect(again.path / "memory.sqlite").execute("select x from t").fetchall() == [(7,)]
    assert again.push() == 0  # what came from the bucket is not sent back


def test_an_unreachable_bucket_is_one_line_at_open_and_a_warning_at_push(gcs, staging: Path, monkeypatch, caplog):
    rd = open_run_dir("gs://bkt/runs/b")
    (rd.path / "metrics.jsonl").write_text("{}\n")
    for key in ("STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL"):
        monkeypatch.setenv(key, "http://127.0.0.1:9")  # nothing listens there
    import fsspec

    fsspec.filesystem("gs").clear_instance_cache()  # gcsfs reads the endpoint when an instance is made
    try:
        with caplog.at_level(logging.WARNING, logger="spade_jax"):
            assert rd.push() == 0  # the run goes on
        warned = [r.getMessage() for r in caplog.records if r.name == "spade_jax"]
        assert not any(r.exc_info for r in caplog.records), "a traceback page was logged"
        assert len(warned) == 1 and "upload failed" in warned[0] and "\n" not in warned[0], warned
        with pytest.raises(RunDirError, match=r"^cannot read run directory gs://bkt/runs/b: ") as e:
            open_run_dir("gs://bkt/runs/b")
        assert "\n" not in str(e.value)
    finally:
        monkeypatch.undo()
        fsspec.filesystem("gs").clear_instance_cache()


def test_checkpoints_in_the_bucket_save_restore_and_set_aside(gcs, tmp_path: Path) -> None:
    import jax.numpy as jnp

    from spade_jax.rundir.checkpoints import Checkpointer

    url = "gs://bkt/runs/c"
    ckpt = Checkpointer(f"{url}/checkpoints", max_to_keep=3, async_save=True)
    for step in (1, 2):
        ckpt.save(step, {"params": {"w": jnp.full((4, 3), float(step))}}, {"step": step})
    ckpt.wait()
    assert ckpt.all_steps() == [1, 2]
    trees, meta = ckpt.restore(None, {"params": {"w": jnp.zeros((4, 3))}})
    assert meta == {"step": 2} and np.all(np.asarray(trees["params"]["w"]) == 2.0)

    moved = ckpt.set_aside(2, tmp_path)  # a damaged step: out of the checkpoint folder, kept in the bucket
    assert str(moved).startswith(f"{url}/damaged/checkpoint-2-") and ckpt.all_steps() == [1]
    assert _fs().exists(f"{moved}/commit_success.txt")
    ckpt.close()
    reopened = Checkpointer(f"{url}/checkpoints", async_save=False)
    assert reopened.latest_step() == 1
    reopened.close()
