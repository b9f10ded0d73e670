"""The reference's batch and loss (issue 45, points 1-4, 12 and 14), worked out by hand from its code and checked
against ours: how many plays an environment gets, which samples make the global batch and in what order, the
designer's reward scale, each sample's loss weight, the KL cap, and the importance weight at the sampling
temperature. The numbers below come from the reference's rules (spade/core/orchestrator.py collect_trajectories,
spade/slime/spade_rollout.py, slime's loss.py / cp_utils.py / ppo_utils.py), computed here by hand, never read
back from our output. The learner runs for real on a tiny random model.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax import streams
from spade_jax.config.learner import LearnerConfig
from spade_jax.config.selfplay import SelfPlayConfig
from spade_jax.rl.batch import pack_sequences
from spade_jax.rl.learner import Learner
from spade_jax.rl.losses import policy_loss, token_logprobs
from spade_jax.run.learn import BatchRule, to_train_samples
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.selfplay.cycle import PlayableEnv, SelfPlay
from spade_jax.trajectory import AGENT, DESIGNER, Sample
from tests.test_rl_learner import _model

REF = BatchRule(policy="reference", global_batch=6, loss_agg="sample_mean_fixed", role_norm="none",
                regen_interval=4)  # fmt: skip


def _play(env: str, reward: float, n: int = 3, step: int = 4) -> Sample:
    group = f"agent/{step}/{env}/no_hint"
    return Sample([1, 2], [3] * n, [1] * n, [-0.5] * n, role=AGENT, reward=reward, group_id=group, meta={"env": env})


def _design(reward: float, skill: str = "x", n: int = 10) -> Sample:
    return Sample([1], [4] * n, [1] * n, [-0.5] * n, role=DESIGNER, reward=reward, group_id=f"designer/0/game/{skill}")


# ------------------------------------------------------------------------------------------ point 1: plays


def test_unhinted_plays_fill_the_global_batch():
    """ceil(192 / games) unhinted plays per game (collect_trajectories); 16 hinted ones at a regeneration step,
    on seeds of their own unless paired."""
    cfg = SelfPlayConfig(agent_batch=192, plays_per_condition=16)
    assert [cfg.unhinted_plays(n) for n in (24, 20, 12, 1)] == [8, 10, 16, 192]
    assert SelfPlayConfig(plays_per_condition=16).unhinted_plays(24) == 16  # ours: K and K

    specs = []
    for paired in (False, True):
        sp = SelfPlay(SelfPlayConfig(agent_batch=7, plays_per_condition=4, paired_seeds=paired, seed=3),
                      sampler=None, tokenizer=None, pool=None, corpus=None)  # fmt: skip
        sp.run = lambda s: specs.append(list(s))  # the specs the rollout would play
        envs = [PlayableEnv(f"e{i}", "src", "game", "logic", hint="h") for i in range(3)]
        sp.play(envs, step=8, hinted=True)
        sp.close()
    unpaired, paired_specs = specs
    for group in (unpaired, paired_specs):
        # environment by environment, hinted first: 4 hinted and ceil(7 / 3) = 3 unhinted each
        assert [(s.env_id, str(s.condition)) for s in group] == [
            (f"e{i}", c) for i in range(3) for c in ["hint"] * 4 + ["no_hint"] * 3
        ]
    plain = {s.seed for s in unpaired if s.condition == "no_hint" and s.env_id == "e0"}
    assert plain == {streams.episode_seed(3, "e0", 8, k) for k in range(3)}
    hinted = [s.seed for s in unpaired if s.condition == "hint" and s.env_id == "e0"]
    assert hinted == [streams.derive(3, "hinted", "e0", 8, k) for k in range(4)] and not set(hinted) & plain
    paired_hinted = [s.seed for s in paired_specs if s.condition == "hint" and s.env_id == "e0"]
    assert paired_hinted == [streams.episode_seed(3, "e0", 8, k) for k in range(4)]  # hinted play k = unhinted k


# --------------------------------------------------------------------------- points 2 and 4: batch, scale


def test_reference_batch_by_hand():
    """A designer step with G = 6: two designs (same skill, rewards 0.9 and 0.3) and six plays of two
    environments, 2 designs made this step. By the reference's rules:
    - scale = min(agent / designs x 4, 50) with agent = max(6, 6 - 2) = 6: 6 / 2 x 4 = 12;
    - designer advantages (0.9 - 0.6) x 12 = 3.6 and -3.6; agent z-scores per environment with the population
      std: a = [1, 0, 0.5] -> [sqrt(1.5), -sqrt(1.5), 0]; b = [0, 0, 1] -> [-1/sqrt(2), -1/sqrt(2), sqrt(2)];
    - order: the two designs, then the plays in play order; 8 > 6: the tail is cut (b's last two plays);
    - a's third play has advantage 0: it counts in G but is not computed (no KL)."""
    a = [_play("a", r) for r in (1.0, 0.0, 0.5)]
    b = [_play("b", r) for r in (0.0, 0.0, 1.0)]
    batch = SelfPlayBatch(agent=(*a, *b), designer=(_design(0.9), _design(0.3)), designs_made=2)
    samples, stats = to_train_samples(batch, REF)
    assert stats["design/reward_scale"] == 12.0
    assert stats["train/batch_cut"] == 2 and stats["train/batch_pads"] == 0 and stats["train/batch_duplicates"] == 0
    assert [s.role for s in samples] == [DESIGNER, DESIGNER, AGENT, AGENT, AGENT]
    assert [s.advantage for s in samples] == pytest.approx([3.6, -3.6, math.sqrt(1.5), -math.sqrt(1.5),
                                                            -1 / math.sqrt(2)], rel=1e-6)  # fmt: skip
    assert [s.meta.get("env") for s in samples[2:]] == ["a", "a", "b"]
    # each sample's tokens weigh 1 / (its tokens x G): a 10-token design and a 3-token play count the same
    assert [s.loss_weight for s in samples] == pytest.approx([1 / 60, 1 / 60, 1 / 18, 1 / 18, 1 / 18])

    # ours ("all", token_mean): every play with a signal, no cut, the automatic scale over all 6 plays
    ours, st = to_train_samples(batch, BatchRule(role_norm="none"))
    assert len(ours) == 7 and st["design/reward_scale"] == 12.0 and all(s.loss_weight is None for s in ours)


def test_reference_batch_duplicates_and_pads():
    """Off a regeneration step the agent fills G = 6 alone: three plays are repeated round-robin from the first
    (same advantages). At a regeneration step that made 4 designs the floor is 6 - 4 = 2: three plays and one
    design make 4 < 6, so 2 inert pads complete the batch and, with no KL, the real advantages are multiplied by
    6 / 4 (the reference's stand-in for a dynamic batch size); with a KL term they are not."""
    plays = [_play("a", r) for r in (1.0, 0.0, 0.0)]
    z = [math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)]  # mean 1/3, population std sqrt(2)/3
    samples, stats = to_train_samples(SelfPlayBatch(agent=tuple(plays)), REF)
    assert stats["train/batch_duplicates"] == 3 and stats["train/batch_pads"] == 0
    assert [s.advantage for s in samples] == pytest.approx(z + z, rel=1e-6)

    batch = SelfPlayBatch(agent=tuple(plays), designer=(_design(0.5, "y"),), designs_made=4)
    samples, stats = to_train_samples(batch, REF)
    assert stats["train/batch_pads"] == 2 and stats["train/advantage_rescale"] == 1.5
    assert stats["design/reward_scale"] == 12.0  # agent max(3, 6 - 4) = 3 per design: 3 / 1 x 4
    assert [s.advantage for s in samples] == pytest.approx([1.5 * x for x in z], rel=1e-6)  # a lone design: 0
    kl = to_train_samples(batch, dataclasses.replace(REF, extra_terms=True))[0]
    assert [s.advantage for s in kl if s.advantage] == pytest.approx(z, rel=1e-6)
    assert len(kl) == 4 and kl[0].role == DESIGNER and kl[0].advantage == 0  # kept: the KL term needs it


# ------------------------------------------------------------------------------------ point 3: the loss


def test_sample_mean_fixed_loss_by_hand():
    """With the sampler equal to the learner (ratio 1, weight 1) every trained token's loss is -A, so the
    reference's loss is -sum(A_s) / G whatever the lengths, and the token mean -sum(A_s n_s) / sum(n_s)."""
    lengths, adv, g = (2, 5, 9), (1.0, -0.5, 2.0), 6
    samples = [Sample([7, 8, 9], list(range(10, 10 + n)), advantage=a, role=i % 2)
               for i, (n, a) in enumerate(zip(lengths, adv))]  # fmt: skip
    want = {"sample_mean_fixed": -sum(adv) / g,
            "token_mean": -sum(a * n for a, n in zip(adv, lengths)) / sum(lengths)}  # fmt: skip
    for agg, expected in want.items():
        learner = Learner(_model(), LearnerConfig(lr=0.0, loss_agg=agg, compute_entropy=False))
        batch = (
            samples
            if agg == "token_mean"
            else [dataclasses.replace(s, loss_weight=1 / (n * g)) for s, n in zip(samples, lengths)]
        )
        loss = learner.train_step(pack_sequences(batch, length_buckets=(16,)))["loss"]
        assert loss == pytest.approx(expected, rel=1e-5), agg


# -------------------------------------------------------------------------------------------- point 12


def test_kl_is_clamped_and_taken_over_every_sample():
    """low_var_kl: k3 = exp(d) - d - 1 with d = ref - logp, clamped to [-10, 10]; zero-advantage samples keep
    their KL term under the reference's batch (they stay in the batch)."""
    logp = jnp.asarray([[0.0, -1.0, -1.0, -1.0]])
    ref = jnp.asarray([[0.0, -1.0, 2.0, 5.0]])  # d = 0, 3, 6: k3 = 0, e^3 - 4 = 16.09 -> 10, e^6 - 7 -> 10
    mask = jnp.asarray([[0.0, 1.0, 1.0, 1.0]])
    zero = jnp.zeros((1, 4))
    _, m = policy_loss(logp, logp, logp, zero, mask, ref_logprobs=ref, kl_coef=1.0, kl_clip=10.0)
    assert float(m["kl"]) == pytest.approx((0 + 10 + 10) / 3)
    loss, m0 = policy_loss(logp, logp, logp, zero, mask, ref_logprobs=ref, kl_coef=1.0)
    assert float(m0["kl"]) == pytest.approx((0 + math.exp(3) - 4 + math.exp(6) - 7) / 3, rel=1e-5)
    kept, _ = to_train_samples(SelfPlayBatch(agent=(_play("a", 1.0), _play("a", 1.0))),
                               dataclasses.replace(REF, extra_terms=True))  # fmt: skip
    assert len(kept) == 6 and all(s.advantage == 0 for s in kept)  # duplicated to G, all with their KL term


# -------------------------------------------------------------------------------------------- point 14


def test_tis_weight_at_the_sampling_temperature():
    """The reference's weight: min(exp(logp(T=1) - log softmax(logits / 0.6)[token]), 2), computed here with
    numpy from the logits; our learner-side tempered log-probs reproduce it for a fresh sample."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 11)).astype(np.float32)
    hidden = jnp.asarray(rng.normal(size=(1, 6, 8)).astype(np.float32))
    tokens = jnp.asarray(rng.integers(0, 11, size=(1, 6)).astype(np.int32))
    lp, _, cold = token_logprobs(lambda h: h @ w, hidden, tokens, chunk_size=2, tempered_at=0.6)
    logits = np.asarray(hidden)[0] @ w
    t = np.asarray(tokens)[0]

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    hot, tempered = log_softmax(logits)[np.arange(5), t[1:]], log_softmax(logits / 0.6)[np.arange(5), t[1:]]
    np.testing.assert_allclose(np.asarray(lp)[0, 1:], hot, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(cold)[0, 1:], tempered, rtol=1e-5, atol=1e-5)
    # the same through the vocabulary walk (learner.vocab_chunk: 11 entries in chunks of 4, the last overlapping)
    _, _, cold_v = token_logprobs(lambda h: h @ w, hidden, tokens, chunk_size=2, tempered_at=0.6,
                                  head=(jnp.asarray(w), 1), vocab_chunk=4)  # fmt: skip
    np.testing.assert_allclose(np.asarray(cold_v)[0, 1:], tempered, rtol=1e-5, atol=1e-5)
    mask = jnp.asarray([[0, 1, 1, 1, 1, 1]], jnp.float32)
    _, m = policy_loss(lp, lp, lp, jnp.ones((1, 6)), mask, tempered_logprobs=cold)
    expected = np.minimum(np.exp(hot - tempered), 2.0)
    assert float(m["is_weight_mean"]) == pytest.approx(expected.mean(), rel=1e-5)
    assert expected.min() < 1.0 < expected.max()  # the mismatch cuts both ways
    stale = lp - 0.3  # sampled by an older policy: its raw log-probs 0.3 lower, the drift factor exp(0.3)
    _, m = policy_loss(lp, lp, stale, jnp.ones((1, 6)), mask, tempered_logprobs=cold)
    assert float(m["is_weight_mean"]) == pytest.approx(np.minimum(np.exp(hot - tempered + 0.3), 2.0).mean(), rel=1e-5)
    jax.clear_caches()
