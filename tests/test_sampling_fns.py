"""Sampling functions against an independent numpy reference (sort-based top-k/top-p, as HF's warpers do)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from spade_jax.sampling import sampling_fns


def reference_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """HF order: temperature, then top-k (ties with the k-th kept), then top-p on the renormalised rest."""
    z = logits.astype(np.float64) / temperature
    if top_k > 0:
        kth = np.sort(z)[::-1][top_k - 1]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        mass_before = np.cumsum(p[order]) - p[order]
        keep = np.zeros_like(p, dtype=bool)
        keep[order[mass_before < top_p]] = True
        p = np.where(keep, p, 0.0)
        p /= p.sum()
    return p


_sample = jax.jit(sampling_fns.sample)


def draw_many(logits: np.ndarray, n: int, temperature: float, top_k: int, top_p: float, seed: int = 0):
    """n independent draws from one logits row (batched as n rows)."""
    rows = jnp.broadcast_to(jnp.asarray(logits, jnp.float32), (n, logits.shape[0]))
    u = jax.random.uniform(jax.random.key(seed), (n,))
    tok, lp, raw = _sample(rows, u, jnp.float32(temperature), jnp.int32(top_k), jnp.float32(top_p))
    return np.asarray(tok), np.asarray(lp), np.asarray(raw)


LOGITS = np.random.default_rng(0).normal(0.0, 2.0, 40).astype(np.float32)


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (0.7, 8, 1.0), (1.3, 0, 0.8), (0.9, 12, 0.9)],
)
def test_empirical_frequencies_match_intended_distribution(temperature, top_k, top_p):
    want = reference_probs(LOGITS, temperature, top_k, top_p)
    n = 40_000
    tok, lp, raw = draw_many(LOGITS, n, temperature, top_k, top_p)
    counts = np.bincount(tok, minlength=LOGITS.shape[0])
    assert counts[want == 0].sum() == 0, "an excluded token was emitted"
    keep = want > 0
    chi2 = ((counts[keep] - n * want[keep]) ** 2 / (n * want[keep])).sum()
    p_value = stats.chi2.sf(chi2, df=keep.sum() - 1)
    assert p_value > 1e-4, f"chi2={chi2:.1f} over {keep.sum()} tokens, p={p_value:.2e}"
    # returned log-probs are those of the intended distribution and of the raw softmax
    np.testing.assert_allclose(lp, np.log(want[tok]), atol=2e-5)
    raw_ref = LOGITS.astype(np.float64) - np.log(np.exp(LOGITS.astype(np.float64)).sum())
    np.testing.assert_allclose(raw, raw_ref[tok], atol=2e-5)


def test_top_k_and_top_p_never_emit_excluded_tokens_on_a_large_vocab():
    logits = np.random.default_rng(1).normal(0.0, 3.0, 5000).astype(np.float32)
    for top_k, top_p in [(5, 1.0), (0, 0.5), (50, 0.3), (1, 1.0)]:
        want = reference_probs(logits, 1.0, top_k, top_p)
        tok, lp, _ = draw_many(logits, 4000, 1.0, top_k, top_p, seed=top_k)
        assert set(tok.tolist()) <= set(np.flatnonzero(want).tolist()), (top_k, top_p)
        np.testing.assert_allclose(lp, np.log(want[tok]), atol=2e-5)
    tok, lp, _ = draw_many(logits, 100, 1.0, 1, 1.0)
    assert (tok == logits.argmax()).all() and np.allclose(lp, 0.0, atol=1e-6)


def test_boundary_ties_are_all_kept_and_top_p_counts_mass_before_a_token():
    logits = np.log(np.array([0.4, 0.2, 0.2, 0.1, 0.1], np.float32))
    mask = np.asarray(sampling_fns.keep_mask(jnp.exp(jnp.asarray(logits))[None], jnp.int32(2), jnp.float32(1.0)))[0]
    assert mask.tolist() == [True, True, True, False, False]  # top-2 keeps both tokens tied at the 2nd value
    mask = np.asarray(sampling_fns.keep_mask(jnp.exp(jnp.asarray(logits))[None], jnp.int32(0), jnp.float32(0.4)))[0]
    assert mask.tolist() == [True, False, False, False, False]  # mass before token 1 is 0.4, not < 0.4
    mask = np.asarray(sampling_fns.keep_mask(jnp.exp(jnp.asarray(logits))[None], jnp.int32(0), jnp.float32(0.45)))[0]
    assert mask.tolist() == [True, True, True, False, False]


def test_draw_skips_zero_weight_tokens_even_at_the_ends_of_the_unit_interval():
    w = np.zeros((4, 700), np.float32)
    w[:, 3] = 1.0
    w[:, 600] = 2.0
    u = jnp.asarray([0.0, 1.0 - 2**-24, 0.3334, 0.9999], jnp.float32)
    tok, total = sampling_fns.draw(jnp.asarray(w), u)
    assert np.asarray(tok).tolist() == [3, 600, 600, 600]
    np.testing.assert_allclose(np.asarray(total), 3.0)


def test_greedy_is_argmax_with_point_mass_logprob():
    logits = jnp.asarray(np.random.default_rng(2).normal(size=(3, 100)), jnp.float32)
    tok, lp, raw = sampling_fns.greedy(logits)
    assert np.array_equal(np.asarray(tok), np.argmax(np.asarray(logits), -1))
    assert np.all(np.asarray(lp) == 0.0)
    np.testing.assert_allclose(np.asarray(raw), np.asarray(jax.nn.log_softmax(logits))[np.arange(3), tok], atol=1e-6)
