"""Agent episodes on the continuous-batching engine (a tiny random model with SmolLM2's tokenizer and chat
template, through the real host pool): the same episodes as the per-turn path (one `generate` call per round
of turns), whatever the slot count, and sampled runs that reproduce bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from spade_jax.config.selfplay import RolloutConfig
from spade_jax.envs.seeds import load_seed_source
from spade_jax.selfplay.rollouts import EpisodeSpec, ModelPolicy, RolloutEngine

pytestmark = pytest.mark.slow
POOL_CALL_TIMEOUT_S = 5.0  # for the `pool` fixture in conftest.py
CONTEXT = 1024


@pytest.fixture(scope="module")
def tiny_smollm():
    from spade_jax.model.loading import load_model

    _, model, tok = load_model("tiny-smollm")
    return model, tok


class _GenerateOnly:
    """The sampler seen through `generate` alone: the policy falls back to one call per round of turns."""

    def __init__(self, sampler):
        self.sampler = sampler

    def generate(self, prompts, params):
        return self.sampler.generate(prompts, params)


class _Mixed(ModelPolicy):
    """Replies of different lengths: episode i's turns may take 4 + 7 * (i % 5) tokens."""

    @staticmethod
    def _cut(requests):
        for r in requests:
            r.max_new_tokens = min(r.max_new_tokens, 4 + 7 * (r.index % 5))
        return requests

    def act(self, requests):
        return super().act(self._cut(requests))

    def submit(self, requests):
        super().submit(self._cut(requests))


def _specs() -> list[EpisodeSpec]:
    return [EpisodeSpec(name, load_seed_source(name), 7 + k, cond, env_hint=True)
            for k, name in enumerate(("number_target", "secret_word", "nim_duel"))
            for cond in ("hint", "no_hint")]  # fmt: skip


_SAMPLERS: dict = {}


def _play(pool, model, tok, *, stream: bool, temperature: float, seed: int = 0, slots: int | None = None):
    """One rollout; samplers are shared by slot count (a run leaves nothing on its engine for the next)."""
    from spade_jax.sampling import Sampler

    sampler = _SAMPLERS.get(slots)
    if sampler is None:
        sampler = _SAMPLERS[slots] = Sampler(model, tok, max_total_len=CONTEXT, chunk_steps=8, decode_slots=slots)
    assert sampler.engine.cache is None and not sampler.pending
    policy = _Mixed(sampler if stream else _GenerateOnly(sampler), tok, temperature=temperature, seed=seed)
    cfg = RolloutConfig(max_turns=3, max_new_tokens_per_turn=32, max_episode_tokens=CONTEXT)
    engine = RolloutEngine(pool, policy, tok, cfg, max_context=CONTEXT)
    result = engine.run(_specs())
    engine.close()
    return result, sampler


def _same(a, b, atol: float = 1e-5) -> None:
    assert len(a.episodes) == len(b.episodes)
    for x, y in zip(a.episodes, b.episodes):
        assert (x.prompt_ids, x.completion_ids, x.completion_mask) == (
            y.prompt_ids,
            y.completion_ids,
            y.completion_mask,
        )
        assert (x.rewards, x.end_reason, x.turn_spans, x.discarded) == (
            y.rewards,
            y.end_reason,
            y.turn_spans,
            y.discarded,
        )
        np.testing.assert_allclose(x.raw_logprobs, y.raw_logprobs, atol=atol)
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=atol)


def test_streamed_episodes_equal_the_per_turn_path(pool, tiny_smollm):
    model, tok = tiny_smollm
    per_turn, _ = _play(pool, model, tok, stream=False, temperature=0.0)
    assert not per_turn.failures and all(1 <= e.turns <= 3 for e in per_turn.episodes)
    assert len({len(e.completion_ids) for e in per_turn.episodes}) > 1  # replies of different lengths
    for slots in (None, 2):  # more episodes in flight (4 sessions) than decode slots: a queue keeps them full
        streamed, sampler = _play(pool, model, tok, stream=True, temperature=0.0, slots=slots)
        _same(streamed, per_turn)
        assert max(k[1] for k in sampler._rt.programs if k[0] == "decode") <= (slots or 64)
        assert sampler.engine.tokens_reused > 0 and sampler.engine.stats["continued"] > 0


def test_sampled_streaming_reproduces_bit_for_bit(pool, tiny_smollm):
    model, tok = tiny_smollm
    a, sa = _play(pool, model, tok, stream=True, temperature=1.0, seed=5, slots=2)
    b, _ = _play(pool, model, tok, stream=True, temperature=1.0, seed=5, slots=2)
    _same(a, b, atol=0.0)
    c, _ = _play(pool, model, tok, stream=True, temperature=1.0, seed=6, slots=2)
    assert [e.completion_ids for e in a.episodes] != [e.completion_ids for e in c.episodes]
    assert 0 < sa.tokens_generated <= sa.slot_steps
