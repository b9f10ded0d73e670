"""Sampling functions against an independent numpy reference (sort-based top-k/top-p, as HF's warpers do), and
the candidate path (a few vocabulary blocks) against the full computation on random and adversarial logits."""

from __future__ import annotations

import collections

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
    logits = jnp.log(jnp.asarray([[0.4, 0.2, 0.2, 0.1, 0.1]], jnp.float32))
    keep = lambda k, p: np.asarray(sampling_fns.keep_mask(logits, 1.0, k, p))[0].tolist()
    assert keep(2, 1.0) == [True, True, True, False, False]  # top-2 keeps both tokens tied at the 2nd value
    assert keep(0, 0.4) == [True, False, False, False, False]  # mass before token 1 is 0.4, not < 0.4
    assert keep(0, 0.45) == [True, True, True, False, False]


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


# ----------------------------------------------------------------------------------------- candidate blocks
Path = sampling_fns.Path
_explain = jax.jit(
    lambda logits, u, t, k, p, g, c: sampling_fns.pick(logits, u, t, k, p, g, candidates=c, explain=True),
    static_argnums=6,
)
_kept = jax.jit(
    lambda logits, t, v: (logits >= v[:, None]) & (jnp.exp((logits - logits.max(-1, keepdims=True)) / t[:, None]) > 0)
)


def reference_keep(x: np.ndarray, temperature: float, top_k: int, top_p: float) -> tuple[np.ndarray, bool, np.ndarray]:
    """(kept tokens, clear, moot) of one row by sorting (float64 masses, the float32 weight decides weight 0).
    clear is False when the top-p boundary lies within float32 summation rounding of the need (either side is
    right); moot marks tokens of subnormal float32 weight, which XLA may flush to 0 (either way is right)."""
    w32 = np.exp((x - x.max()) / np.float32(temperature))
    moot = (w32 > 0) & (w32 < np.finfo(np.float32).tiny)
    keep = w32 > 0
    if top_k > 0:
        keep &= x >= np.sort(x)[::-1][top_k - 1]
    if top_p >= 1.0:
        return keep, True, moot
    w = np.where(keep, w32.astype(np.float64), 0.0)
    order = np.argsort(-x, kind="stable")
    xs, cum = x[order], np.cumsum(w[order])
    ends = np.flatnonzero(np.append(xs[1:] != xs[:-1], True))  # the last token of each run of equal logits
    values, mass_at = xs[ends], cum[ends]  # descending logits; kept mass once every token >= the value is in
    need = top_p * w.sum()
    boundary = int(np.argmax(mass_at >= need))
    before = mass_at[boundary - 1] if boundary else 0.0
    clear = abs(mass_at[boundary] / need - 1) > 1e-5 and (boundary == 0 or abs(before / need - 1) > 1e-5)
    return keep & (x >= values[boundary]), clear, moot


def logit_families(b: int, v: int, rng: np.random.Generator):
    """Random and adversarial logits [b, v]: the candidate path must prove itself exact or step aside."""
    yield "random", rng.normal(0, 3, (b, v))
    yield "llm-like", np.log(rng.zipf(1.3, (b, v)).astype(np.float64)) * 4 + rng.normal(0, 0.5, (b, v))
    yield "ties", np.round(rng.normal(0, 1.5, (b, v)))
    yield "flat", np.zeros((b, v))
    x = rng.normal(0, 1, (b, v))
    x[np.arange(b), rng.integers(0, v, b)] = 1e4
    yield "one-huge", x
    x = rng.normal(0, 1, (b, v))
    x[:, ::7] = -1e30
    yield "very-negative", x
    x = rng.normal(0, 3, (b, v))
    x[np.arange(b)[:, None], rng.integers(0, v, (b, 40))] = 20.0  # 40 tied maxima spread over the blocks
    yield "tied-maxima", x
    x = rng.normal(0, 3, (b, v))
    x[:, : v // 4] += 12  # a dense head: far more likely tokens than the candidates hold
    yield "dense-head", x


SETTINGS = [(0.6, 20, 0.95), (1.0, 1, 1.0), (1.0, 50, 1.0), (1.0, 2000, 1.0), (1.0, 0, 0.5), (0.8, 0, 0.9),
            (0.3, 20, 0.5), (1.0, 0, 1.0)]  # fmt: skip


def test_candidate_path_keeps_and_draws_what_the_full_computation_does():
    """V = 96 blocks with 8 candidate blocks (1,024 tokens): the same logic as 32 of Qwen's 1,187, small enough
    to sweep. Both paths must agree on the kept set, the token (same uniforms) and its log-probs; both agree
    with the sort-based reference; and both paths run."""
    b, v, c = 8, 96 * sampling_fns.BLOCK, 8
    rng = np.random.default_rng(0)
    paths, clear_rows = collections.Counter(), 0
    greedy = jnp.zeros((b,), bool).at[2].set(True)
    for name, x in logit_families(b, v, rng):
        logits = jnp.asarray(x, jnp.float32)
        for t, k, p in SETTINGS:
            args = [jnp.full((b,), val, dt) for val, dt in ((t, jnp.float32), (k, jnp.int32), (p, jnp.float32))]
            u = jnp.asarray(rng.uniform(size=b), jnp.float32)
            fast = _explain(logits, u, *args, greedy, c)
            full = _explain(logits, u, *args, greedy, 0)
            assert int(full.path) in (Path.FULL, Path.UNFILTERED)
            paths[Path(int(fast.path)).name] += 1
            kept_fast, kept_full = (np.asarray(_kept(logits, args[0], r.threshold)) for r in (fast, full))
            live = np.arange(b) != 2
            what = f"{name} T={t} k={k} p={p} ({Path(int(fast.path)).name})"
            assert (kept_fast[live] == kept_full[live]).all(), what
            assert np.array_equal(np.asarray(fast.tokens), np.asarray(full.tokens)), what
            assert np.array_equal(np.asarray(fast.logprob), np.asarray(full.logprob)), what
            assert np.asarray(fast.tokens)[2] == int(np.argmax(x[2])) and float(fast.logprob[2]) == 0.0, what
            for r in np.flatnonzero(live):
                want, clear, moot = reference_keep(np.asarray(logits[r]), t, k, p)
                assert kept_fast[r, np.asarray(fast.tokens)[r]], what  # the drawn token is a kept one
                if clear:
                    clear_rows += 1
                    assert np.array_equal(kept_fast[r][~moot], want[~moot]), f"{what} row {r}"
    assert paths["CANDIDATES"] >= 10 and paths["FULL"] >= 10, paths  # both branches exercised
    assert clear_rows >= 0.9 * len(SETTINGS) * 8 * (b - 1)  # the reference decided nearly every row


def test_candidate_path_falls_back_when_candidates_may_be_incomplete():
    b, v = 4, 64 * sampling_fns.BLOCK
    x = np.random.default_rng(1).normal(0, 3, (b, v)).astype(np.float32)
    u = jnp.asarray([0.1, 0.4, 0.7, 0.95], jnp.float32)
    run = lambda logits, k, p: _explain(jnp.asarray(logits), u, jnp.float32(1.0), jnp.int32(k), jnp.float32(p),
                                        jnp.zeros((b,), bool), 4)  # fmt: skip
    head = x.copy()
    head[:, 1000:1030] += 12.0  # 30 likely tokens in 2 blocks: top-20 is inside the candidates, and provably so
    assert int(run(head, 20, 1.0).path) == Path.CANDIDATES
    assert int(run(head, 600, 1.0).path) == Path.FULL  # k above the 512 candidate tokens
    tied = x.copy()
    tied[:, ::200] = 30.0  # 41 tied maxima in 41 blocks: the 5th-largest block maximum ties the candidates'
    out = run(tied, 20, 1.0)
    assert int(out.path) == Path.FULL
    kept = np.asarray(_kept(jnp.asarray(tied), jnp.ones((b,)), out.threshold))
    assert (kept.sum(-1) == 41).all()  # every tied token, not only the candidates' 4 blocks of them
    assert int(run(x, 0, 0.5).path) == Path.FULL  # a nucleus spread over more blocks than the candidates hold


def test_paper_settings_on_a_qwen_vocabulary_take_the_candidate_path():
    b, v = 4, 151_936
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1.5, (b, v))
    x[:, rng.integers(0, v, 200)] += 6.0  # a plausible head of 200 tokens spread over the vocabulary
    logits, u = jnp.asarray(x, jnp.float32), jnp.asarray(rng.uniform(size=b), jnp.float32)
    args = (jnp.full((b,), 0.6), jnp.full((b,), 20, jnp.int32), jnp.full((b,), 0.95), jnp.zeros((b,), bool))
    fast = _explain(logits, u, *args, sampling_fns.CANDIDATE_BLOCKS)
    assert int(fast.path) == Path.CANDIDATES
    for r in range(b):
        want, clear, moot = reference_keep(x[r].astype(np.float32), 0.6, 20, 0.95)
        kept = np.asarray(_kept(logits, args[0], fast.threshold))[r]
        assert clear and np.array_equal(kept[~moot], want[~moot]) and 10 <= kept.sum() <= 20


def test_same_uniforms_give_the_same_tokens_on_both_paths_and_rows_do_not_depend_on_their_neighbours():
    """Rows of every kind in one batch (a top-k larger than the candidates sends it down the full path): each row's
    token and log-probs equal those it gets alone (where top-k rows take the candidate path), for 16 uniforms (the
    draw itself, not only the kept set, is the same)."""
    v = 48 * sampling_fns.BLOCK
    x = np.random.default_rng(3).normal(0, 2, v).astype(np.float32)
    x[1000:1030] += 12.0
    kinds = [(1.0, 0, 1.0, False), (0.7, 20, 0.95, False), (1.0, 5, 1.0, False), (0.9, 0, 0.8, False),
             (1.0, 1000, 1.0, False), (1.0, 0, 1.0, True)]  # fmt: skip
    n = len(kinds)
    t, k, p, g = (jnp.asarray([kd[i] for kd in kinds]) for i in range(4))
    logits = jnp.broadcast_to(jnp.asarray(x), (n, v))
    paths = set()
    for u0 in np.linspace(0.0, 1.0 - 2**-24, 16):
        u = jnp.full((n,), u0, jnp.float32)
        mixed = _explain(logits, u, t, k, p, g, 4)
        paths.add(("mixed", int(mixed.path)))
        for i in range(n):
            alone = _explain(logits[i : i + 1], u[i : i + 1], t[i : i + 1], k[i : i + 1], p[i : i + 1], g[i : i + 1], 4)
            paths.add((i, int(alone.path)))
            assert int(mixed.tokens[i]) == int(alone.tokens[0]), (i, u0)
            np.testing.assert_allclose(float(mixed.logprob[i]), float(alone.logprob[0]), rtol=1e-6, atol=1e-6)
    assert paths == {("mixed", Path.FULL), (0, Path.UNFILTERED), (1, Path.CANDIDATES), (2, Path.CANDIDATES),
                     (3, Path.CANDIDATES), (4, Path.FULL), (5, Path.GREEDY)}  # fmt: skip


def test_argmax_takes_the_first_of_tied_maxima_across_blocks():
    x = np.zeros((3, 5 * sampling_fns.BLOCK + 7), np.float32)  # a partial last block too
    x[0, [600, 300, 301]] = 2.0
    x[1, -1] = 1.0
    x[2] = -np.inf
    x[2, 129] = -1.0
    assert np.asarray(sampling_fns.argmax(jnp.asarray(x))).tolist() == [300, x.shape[1] - 1, 129]
