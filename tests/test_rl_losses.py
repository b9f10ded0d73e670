"""rl losses, advantages and packing against hand-computed values."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.rl.advantages import group_advantages, group_stats
from spade_jax.rl.batch import Sample, bucket, pack_sequences, unpack_per_token
from spade_jax.rl.losses import cross_entropy_loss, policy_loss, token_logprobs

# Six trained tokens (old logp 0, so ratio = exp(logp)) plus one masked token with absurd values.
RATIOS = np.array([1.5, 0.5, 1.1, 0.7, 1.5, 0.5, 9.0])
ADV = np.array([1.0, -1.0, 2.0, -1.0, -1.0, 1.0, 100.0])
RAW_W = np.array([1.0, 1.0, 3.0, 0.5, 1.0, 1.0, 50.0])  # exp(old - sampler) before truncation at C = 2
MASK = np.array([1, 1, 1, 1, 1, 1, 0], np.float32)


def _pl(logp, **kw):
    old = jnp.zeros(7)
    sampler = -jnp.log(jnp.asarray(RAW_W, jnp.float32))
    return policy_loss(logp, old, sampler, jnp.asarray(ADV, jnp.float32), jnp.asarray(MASK), **kw)


def test_policy_loss_clipping_both_sides_and_is_truncation():
    logp = jnp.log(jnp.asarray(RATIOS, jnp.float32))
    loss, m = _pl(logp)
    # per token -min(rA, clip(r, .8, 1.28) A) times min(w, 2):
    # 0: r 1.5 A+1 -> -1.28 (high clip)    1: r .5 A-1 -> +0.8 (low clip)    2: r 1.1 A+2 -> -2.2, w 2 -> -4.4
    # 3: r .7 A-1 -> +0.8 (low clip), w .5 -> +0.4    4: r 1.5 A-1 -> +1.5 (not clipped)    5: r .5 A+1 -> -0.5
    expected = (-1.28 + 0.8 - 4.4 + 0.4 + 1.5 - 0.5) / 6
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert float(m["clip_frac_high"]) == pytest.approx(1 / 6)
    assert float(m["clip_frac_low"]) == pytest.approx(2 / 6)
    assert float(m["is_truncated_frac"]) == pytest.approx(1 / 6)
    assert float(m["is_weight_mean"]) == pytest.approx(6.5 / 6, abs=1e-6)
    assert float(m["is_weight_max"]) == pytest.approx(2.0)
    assert float(m["ratio_mean"]) == pytest.approx(RATIOS[:6].mean(), abs=1e-6)

    grad = np.asarray(jax.grad(lambda lp: _pl(lp)[0])(logp))
    # d/dlogp of -w A r for unclipped tokens; 0 where the clipped branch is taken or the mask is 0
    expected_grad = np.array([0, 0, -2 * 2 * 1.1, 0, -1 * -1 * 1.5, -1 * 1 * 0.5, 0]) / 6
    np.testing.assert_allclose(grad, expected_grad, atol=1e-6)


def test_unknown_sampler_logprobs_mean_weight_one():
    logp = jnp.log(jnp.asarray(RATIOS, jnp.float32))
    sampler = jnp.full(7, jnp.nan)
    loss, m = policy_loss(logp, jnp.zeros(7), sampler, jnp.asarray(ADV, jnp.float32), jnp.asarray(MASK))
    assert float(m["is_weight_mean"]) == 1.0 and np.isfinite(float(m["sampler_kl"]))
    expected = (-1.28 + 0.8 - 2.2 + 0.8 + 1.5 - 0.5) / 6  # the clipped terms of the first test, weights all 1
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    b = pack_sequences([Sample([1], [2, 3], completion_mask=[1, 0])], length_buckets=(4,), batch_buckets=(1,))
    np.testing.assert_array_equal(np.isnan(b.sampler_logprobs[0]), [False, True, False, False])


def test_policy_loss_is_cap_and_clip_eps_configurable():
    logp = jnp.log(jnp.asarray(RATIOS, jnp.float32))
    loss, _ = _pl(logp, is_cap=10.0, clip_low=0.6, clip_high=1.0)
    # clip range [0.4, 2.0]: nothing clipped; weights untruncated
    per = -RATIOS * ADV * RAW_W
    assert float(loss) == pytest.approx(per[:6].sum() / 6, rel=1e-6)


def test_policy_loss_on_policy_gradient_is_reinforce():
    """With old = stop_gradient(logp) and sampler = old, the gradient is -A * mask / N (plain REINFORCE)."""
    logp = jnp.asarray([-1.0, -2.0, -0.5])
    adv, mask = jnp.asarray([1.0, -2.0, 3.0]), jnp.asarray([1.0, 1.0, 0.0])

    def f(lp):
        return policy_loss(lp, jax.lax.stop_gradient(lp), jax.lax.stop_gradient(lp), adv, mask)[0]

    np.testing.assert_allclose(np.asarray(jax.grad(f)(logp)), [-0.5, 1.0, 0.0], atol=1e-7)
    assert float(f(logp)) == pytest.approx((-1.0 + 2.0) / 2)


def test_token_level_mean_not_sequence_mean():
    """Row 0 has one trained token, row 1 three: the loss is their sum over 4, not the mean of row means."""
    logp = jnp.zeros((2, 3))
    adv = jnp.asarray([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])
    mask = jnp.asarray([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    loss, _ = policy_loss(logp, logp, logp, adv, mask)
    assert float(loss) == pytest.approx(-(2.0 + 3.0) / 4)
    loss_n, _ = policy_loss(logp, logp, logp, adv, mask, normalizer=10.0)
    assert float(loss_n) == pytest.approx(-(2.0 + 3.0) / 10)


def test_kl_k3_and_entropy_bonus():
    logp = jnp.log(jnp.asarray([0.5, 0.25]))
    ref = jnp.log(jnp.asarray([1.0, 0.25]))  # d = ref - logp = [log 2, 0]
    zero = jnp.zeros(2)
    mask = jnp.ones(2)
    ent = jnp.asarray([1.0, 3.0])
    loss, m = policy_loss(logp, logp, logp, zero, mask, ref_logprobs=ref, kl_coef=0.5, entropy=ent, entropy_coef=0.1)
    k3 = (2.0 - math.log(2.0) - 1.0 + 0.0) / 2
    assert float(m["kl"]) == pytest.approx(k3, abs=1e-6)
    assert float(m["entropy"]) == pytest.approx(2.0)
    assert float(loss) == pytest.approx(0.5 * k3 - 0.1 * 2.0, abs=1e-6)
    loss0, _ = policy_loss(logp, logp, logp, zero, mask, ref_logprobs=ref, entropy=ent)  # coefs default 0
    assert float(loss0) == 0.0


def test_cross_entropy_masked_token_mean():
    logp = jnp.asarray([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0]])
    mask = jnp.asarray([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, _ = cross_entropy_loss(logp, mask)
    assert float(loss) == pytest.approx(2.0)


@pytest.mark.parametrize("chunk", [0, 2, 3])
def test_token_logprobs_match_numpy(chunk):
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 7, 5)).astype(np.float32)
    w = rng.normal(size=(5, 11)).astype(np.float32)
    tokens = rng.integers(0, 11, size=(2, 7)).astype(np.int32)
    logits = hidden @ w
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    logsm = logits - logz[..., None]
    want = np.zeros((2, 7), np.float32)
    want[:, 1:] = np.take_along_axis(logsm[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    p = np.exp(logsm)
    want_ent = np.zeros((2, 7), np.float32)
    want_ent[:, 1:] = -(p * logsm).sum(-1)[:, :-1]

    def f(h, w_):
        return token_logprobs(lambda x: x @ w_, h, jnp.asarray(tokens), chunk_size=chunk)

    lp, ent = f(jnp.asarray(hidden), jnp.asarray(w))
    np.testing.assert_allclose(np.asarray(lp), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), want_ent, atol=1e-5)
    # gradients through the chunked (checkpointed) path equal the unchunked ones
    g = jax.grad(lambda h, w_: f(h, w_)[0].sum(), argnums=(0, 1))(jnp.asarray(hidden), jnp.asarray(w))
    g0 = jax.grad(
        lambda h, w_: token_logprobs(lambda x: x @ w_, h, jnp.asarray(tokens), chunk_size=0)[0].sum(), argnums=(0, 1)
    )(jnp.asarray(hidden), jnp.asarray(w))
    for a, b in zip(g, g0):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_group_advantages_centred_not_std_scaled():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.2]
    groups = ["a", "a", "a", "a", "b", "b", "c"]
    adv = group_advantages(rewards, groups, role_norm="none")
    np.testing.assert_allclose(adv, [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0], atol=1e-7)
    # per-role std: role 0 = first four (std 0.5), role 1 = the rest (all zero, stays zero)
    roles = [0, 0, 0, 0, 1, 1, 1]
    adv = group_advantages(rewards, groups, roles=roles, role_norm="std")
    np.testing.assert_allclose(adv, [1.0, -1.0, -1.0, 1.0, 0.0, 0.0, 0.0], atol=1e-6)
    # groups of unequal reward scale in two roles: each role is scaled by its own std
    adv = group_advantages([4.0, 0.0, 0.2, 0.0], [1, 1, 2, 2], roles=[0, 0, 1, 1], role_norm="std")
    np.testing.assert_allclose(adv, [1.0, -1.0, 1.0, -1.0], atol=1e-5)
    st = group_stats(rewards, groups)
    assert st["groups"] == 3 and st["informative_group_frac"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="role_norm"):
        group_advantages(rewards, groups, role_norm="zscore")


def test_pack_sequences_layout():
    samples = [
        Sample([5, 6], [7, 8, 9], completion_mask=[1, 0, 1], logprobs=[-0.1, -9.0, -0.3], advantage=2.0, role=0),
        Sample([5], [4], logprobs=[-0.5], advantage=-1.0, role=0),
        {"prompt_ids": [3, 3, 3], "completion_ids": [1, 2], "advantage": [0.5, 0.25], "role": 1},
    ]
    b = pack_sequences(samples, length_buckets=(4, 8, 16), batch_buckets=(4,))
    assert b.tokens.shape == (4, 8)  # longest sample 5 -> bucket 8; 2 rows (one per role) -> batch bucket 4
    np.testing.assert_array_equal(b.roles, [0, 1, -1, -1])
    np.testing.assert_array_equal(b.tokens[0], [5, 6, 7, 8, 9, 5, 4, 0])
    np.testing.assert_array_equal(b.positions[0], [0, 1, 2, 3, 4, 0, 1, 0])
    np.testing.assert_array_equal(b.segment_ids[0], [1, 1, 1, 1, 1, 2, 2, 0])
    np.testing.assert_array_equal(b.sample_ids[0], [0, 0, 0, 0, 0, 1, 1, -1])
    np.testing.assert_array_equal(b.loss_mask[0], [0, 0, 1, 0, 1, 0, 1, 0])
    np.testing.assert_allclose(b.sampler_logprobs[0], [0, 0, -0.1, 0, -0.3, 0, -0.5, 0])
    np.testing.assert_allclose(b.advantages[0], [0, 0, 2, 2, 2, 0, -1, 0])
    np.testing.assert_array_equal(b.tokens[1], [3, 3, 3, 1, 2, 0, 0, 0])
    np.testing.assert_allclose(b.advantages[1], [0, 0, 0, 0.5, 0.25, 0, 0, 0])
    assert b.loss_mask[2:].sum() == 0 and b.segment_ids[2:].sum() == 0
    parts = unpack_per_token(b, b.tokens, 3)
    np.testing.assert_array_equal(parts[2], [3, 3, 3, 1, 2])

    unpacked = pack_sequences(samples, length_buckets=(4, 8, 16), batch_buckets=(2, 4), pack=False)
    assert unpacked.tokens.shape == (4, 8) and (unpacked.segment_ids.max(axis=1) <= 1).all()


def test_pack_sequences_errors_and_buckets():
    assert bucket(3, (4, 8)) == 4 and bucket(9, (4, 8)) == 16 and bucket(8, (8, 4)) == 8
    with pytest.raises(ValueError, match="largest length bucket"):
        pack_sequences([Sample([1] * 10, [2])], length_buckets=(8,))
    with pytest.raises(ValueError, match="empty prompt"):
        pack_sequences([Sample([], [2])], length_buckets=(8,))
    with pytest.raises(ValueError, match="logprobs has 1 entries for 2"):
        pack_sequences([Sample([1], [2, 3], logprobs=[0.0])], length_buckets=(8,))
    with pytest.raises(ValueError, match="unknown sample keys"):
        pack_sequences([{"prompt": [1]}], length_buckets=(8,))


@pytest.mark.parametrize("tied", [True, False])
def test_vocabulary_chunks_give_the_same_logprobs_entropy_and_gradients(tied):
    """`token_logprobs` over chunks of the vocabulary (its own backward pass) against the whole vocabulary: values
    and gradients for the hidden states and the head, a tied table [V, E] and an untied kernel [E, V], chunks that
    do not divide V (the last overlaps the one before), inside chunks of positions, with and without entropy."""
    rng = np.random.default_rng(3)
    b, t, e, v = 2, 13, 8, 300
    hidden = jnp.asarray(rng.normal(size=(b, t, e)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, v, (b, t)), jnp.int32)
    head = jnp.asarray(rng.normal(size=(v, e) if tied else (e, v)), jnp.float32)
    spec = "bte,ve->btv" if tied else "bte,ev->btv"
    axis = 0 if tied else 1

    def run(h, w, *, vocab_chunk, chunk_size, with_entropy):
        lp, ent = token_logprobs(lambda x: jnp.einsum(spec, x, w), h, tokens, chunk_size=chunk_size,
                                 with_entropy=with_entropy, head=(w, axis), vocab_chunk=vocab_chunk)  # fmt: skip
        loss = jnp.sum(lp * jnp.arange(t)) + (jnp.sum(ent * 0.3) if with_entropy else 0.0)
        return loss, (lp, ent)

    def grad(**kw):
        return jax.jit(jax.value_and_grad(lambda h, w: run(h, w, **kw), argnums=(0, 1), has_aux=True))(hidden, head)

    for with_entropy in (True, False):
        (_, want), g_want = grad(vocab_chunk=0, chunk_size=0, with_entropy=with_entropy)
        for vocab_chunk, chunk_size in ((64, 0), (128, 5)):  # 300 = 4 x 64 + 44; 3 x 128 with overlap
            (_, got), g_got = grad(vocab_chunk=vocab_chunk, chunk_size=chunk_size, with_entropy=with_entropy)
            np.testing.assert_allclose(got[0], want[0], atol=2e-5)
            if with_entropy:
                np.testing.assert_allclose(got[1], want[1], atol=2e-5)
            for a, c in zip(g_got, g_want):
                np.testing.assert_allclose(a, c, atol=2e-4, rtol=1e-5)
