"""The learning test: on-policy train_step steps make a tiny random policy win a two-turn token game.

The game (pure python, inline): the prompt is [BOS, c] for a context c in 1..4. The agent emits a token a1,
the environment answers with an observation token (masked out of the loss), the agent emits a2. Reward is
0.5 per correct action (a1 == c + 3, a2 == c + 7); a win is both correct. A random policy wins ~1/144.
Samples are drawn with jax.random.categorical straight from the model's logits (no sampler module).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model.config import ModelConfig
from spade_jax.model.transformer import Transformer
from spade_jax.rl.advantages import group_advantages
from spade_jax.rl.batch import Sample, pack_sequences
from spade_jax.rl.learner import Learner, LearnerConfig

VOCAB, BOS, OBS = 12, 0, 2
CONTEXTS = (1, 2, 3, 4)
GROUP = 16


def _target(c: int, turn: int) -> int:
    return c + 3 if turn == 0 else c + 7


def _sample_next(graphdef, state, tokens, key):
    """One token per row from the last position's logits; also its log-prob under those logits."""
    model = nnx.merge(graphdef, *state)
    logits, _ = model(tokens)
    last = logits[:, -1]
    tok = jax.random.categorical(key, last)
    lp = jnp.take_along_axis(jax.nn.log_softmax(last), tok[:, None], axis=-1)[:, 0]
    return tok, lp


def _rollouts(model, key, sample_fn):
    graphdef, *state = nnx.split(model, nnx.Param, ...)
    ctx = np.repeat(np.array(CONTEXTS), GROUP)
    tokens = np.stack([np.full_like(ctx, BOS), ctx], axis=1).astype(np.int32)
    k1, k2 = jax.random.split(key)
    a1, lp1 = map(np.asarray, sample_fn(graphdef, state, jnp.asarray(tokens), k1))
    tokens2 = np.concatenate([tokens, a1[:, None], np.full_like(a1[:, None], OBS)], axis=1).astype(np.int32)
    a2, lp2 = map(np.asarray, sample_fn(graphdef, state, jnp.asarray(tokens2), k2))
    samples, rewards, wins = [], [], []
    for i, c in enumerate(ctx):
        ok1, ok2 = a1[i] == _target(c, 0), a2[i] == _target(c, 1)
        rewards.append(0.5 * ok1 + 0.5 * ok2)
        wins.append(ok1 and ok2)
        samples.append(
            Sample(
                prompt_ids=[BOS, int(c)],
                completion_ids=[int(a1[i]), OBS, int(a2[i])],
                completion_mask=[1, 0, 1],
                logprobs=[float(lp1[i]), 0.0, float(lp2[i])],
            )
        )
    return samples, rewards, ctx, float(np.mean(wins))


@pytest.mark.slow
def test_train_step_raises_win_rate():
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8)  # fmt: skip
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    learner = Learner(model, LearnerConfig(lr=1e-2, micro_batch_size=16))
    sample_fn = jax.jit(_sample_next, static_argnums=0)
    key = jax.random.key(0)
    win_rates = []
    for _ in range(60):
        key, sub = jax.random.split(key)
        samples, rewards, ctx, win = _rollouts(learner.model, sub, sample_fn)
        win_rates.append(win)
        adv = group_advantages(rewards, ctx.tolist(), role_norm="std")
        for s, a in zip(samples, adv):
            s.advantage = float(a)
        batch = pack_sequences(samples, length_buckets=(8,), batch_buckets=(32,))
        metrics = learner.train_step(batch)
        assert np.isfinite(metrics["loss"])
        # sampler and learner are the same float32 model: importance weights ~1, nothing truncated
        assert abs(metrics["is_weight_mean"] - 1.0) < 1e-3 and metrics["is_truncated_frac"] == 0.0
    start, end = np.mean(win_rates[:3]), np.mean(win_rates[-5:])
    assert start < 0.1, win_rates
    assert end > 0.6, win_rates
    assert learner.compile_count <= 4  # micro step (with / without accumulator) + apply: shapes never change
