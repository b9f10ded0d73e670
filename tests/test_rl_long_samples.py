"""Long samples: the learner's length buckets cover the run's max_total_len, and a sample no bucket holds is
dropped and counted by the loop (`train/dropped_too_long`), never a crash."""

from __future__ import annotations

import numpy as np
import pytest

import spade_jax.run.learn as learn
from spade_jax.config.run import RUN_PRESETS, RunConfig
from spade_jax.rl.batch import DEFAULT_BATCH_BUCKETS, Sample, bucket, pack_sequences
from spade_jax.rl.learner import Learner, LearnerConfig
from tests.test_rl_learner import _model


def _long(n: int, role: int = 1, advantage: float = 1.0) -> Sample:
    return Sample(prompt_ids=[1] * 100, completion_ids=[2] * (n - 100), advantage=advantage, role=role)


def test_buckets_cover_max_total_len():
    from spade_jax.config.learner import length_buckets_for

    assert length_buckets_for(32768) == (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
    assert length_buckets_for(4096)[-1] == 4096 and length_buckets_for(5000)[-2:] == (4096, 5120)
    assert length_buckets_for(100) == (128,)
    assert LearnerConfig(length_buckets=(64, 32)).length_buckets_for(10**6) == (32, 64)
    for name, make in RUN_PRESETS.items():
        cfg = make()
        assert max(cfg.learner.length_buckets_for(cfg.max_total_len)) >= cfg.max_total_len, name
    with pytest.raises(ValueError, match=r"length_buckets.*>= 1"):
        LearnerConfig(length_buckets=(0,))
    # past the largest batch bucket the row count is the next multiple of it
    assert bucket(64, DEFAULT_BATCH_BUCKETS) == 64 and bucket(65, DEFAULT_BATCH_BUCKETS) == 128
    assert bucket(130, DEFAULT_BATCH_BUCKETS) == 192


def test_split_trainable_keeps_order_and_counts():
    from spade_jax.rl.batch import split_trainable

    samples = [_long(200), _long(300), {"prompt_ids": [1], "completion_ids": [2] * 10}, _long(257)]
    kept, dropped = split_trainable(samples, 256)
    assert dropped == 2 and kept == [samples[0], samples[2]]


class _RecordingLearner:
    def __init__(self):
        self.shapes, self.model = [], None
        self.config = LearnerConfig()

    def train_step(self, batch):
        self.shapes.append(batch.tokens.shape)
        assert batch.loss_mask.sum() > 0
        return {"loss": 0.0}


def _train(cfg: RunConfig, learner, batch) -> dict:
    buckets = cfg.learner.length_buckets_for(cfg.max_total_len)
    return learn.train_on(batch, learner, learn.BatchRule.of(cfg), buckets=buckets, pad_id=0, sync=lambda: None)


def test_train_on_takes_a_sample_past_16k_tokens(monkeypatch):
    """The paper preset's 32K context: a 16,400-token designer sample trains in a 32768 row, a longer one
    is dropped and counted (before the fix: ValueError out of the loop)."""
    cfg = RUN_PRESETS["paper-qwen3-4b"]()
    samples = [_long(16_400), _long(cfg.max_total_len + 1), _long(500, role=0)]
    monkeypatch.setattr(learn, "to_train_samples", lambda batch, *_: (list(batch), {"train/samples": 3.0}))
    learner = _RecordingLearner()
    stats = _train(cfg, learner, samples)
    assert stats["train/dropped_too_long"] == 1.0 and stats["train/skipped"] == 0.0
    assert learner.shapes == [(2, 32768)]  # one row per role


def test_tiny_model_drops_a_sample_longer_than_max_total_len(monkeypatch):
    cfg = RunConfig(max_total_len=256, learner=LearnerConfig(lr=1e-3))
    rng = np.random.default_rng(0)
    short = [Sample(rng.integers(1, 40, 5).tolist(), rng.integers(1, 40, 8).tolist(), advantage=a, role=0)
             for a in (1.0, -1.0)]  # fmt: skip
    too_long = Sample([3] * 200, [4] * 57, advantage=1.0, role=0)  # 257 > 256
    monkeypatch.setattr(learn, "to_train_samples", lambda batch, *_: (list(batch), {}))
    learner = Learner(_model(), cfg.learner)
    stats = _train(cfg, learner, [*short, too_long])
    assert stats["train/dropped_too_long"] == 1.0 and stats["train/skipped"] == 0.0
    assert stats["train/tokens"] == 16.0  # the two short completions only
    only_long = _train(cfg, learner, [too_long])
    assert only_long["train/dropped_too_long"] == 1.0 and only_long["train/skipped"] == 1.0
    assert pack_sequences(short, length_buckets=cfg.learner.length_buckets_for(256)).tokens.shape[1] == 128
