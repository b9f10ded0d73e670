"""Self-play with the real SmolLM2-135M: a batched hinted/unhinted rollout whose tokens, masks and log-probs
are checked against a separate forward pass, and one full `SelfPlay.step` (designer prompt -> generation ->
extraction -> gates -> verdict in memory, hints, plays, regret, batch).

Kept small for CPUs: a designer prompt is ~2,700 tokens of prefill, the slowest thing here.
"""

from __future__ import annotations

import numpy as np
import pytest

from spade_jax.config.selfplay import (
    CorpusConfig,
    DesignerConfig,
    HintConfig,
    MemoryConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from spade_jax.envs.contract import CONTRACT_TEXT
from spade_jax.envs.seeds import load_seed_source
from spade_jax.gates.sandboxed import validate_static
from spade_jax.selfplay.rollouts import EpisodeSpec, ModelPolicy, RolloutEngine

pytestmark = pytest.mark.slow
CONTEXT = 4096


POOL_CALL_TIMEOUT_S = 5.0  # for the `pool` fixture in conftest.py


@pytest.fixture(scope="module")
def smollm():
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler

    _, model, tok = load_model("smollm2-135m")
    return model, tok, Sampler(model, tok, max_total_len=CONTEXT)


def test_model_rollout_hinted_and_unhinted_together(pool, smollm):
    import jax
    import jax.numpy as jnp

    model, tok, sampler = smollm
    specs = [EpisodeSpec(name, load_seed_source(name), 40, cond, env_hint=True)
             for name in ("number_target", "secret_word") for cond in ("hint", "no_hint")]  # fmt: skip
    sizes: list[tuple[int, set]] = []

    class Counting(ModelPolicy):
        def submit(self, requests):
            sizes.append((len(requests), {r.spec.condition for r in requests}))
            return super().submit(requests)

    cfg = RolloutConfig(max_turns=3, max_new_tokens_per_turn=16, max_episode_tokens=2048)
    engine = RolloutEngine(pool, Counting(sampler, tok, temperature=0.6, seed=3), tok, cfg, max_context=CONTEXT)
    result = engine.run(specs)
    engine.close()
    # every episode, hinted and unhinted, starts on the sampler's engine at once; each later turn joins it as soon
    # as its environment has answered
    assert sizes[0] == (len(specs), {"hint", "no_hint"})
    assert sum(n for n, _ in sizes) == sum(e.turns for e in result.episodes)
    kept = result.kept
    assert len(kept) == len(specs) and not result.failures
    for ep in kept:
        assert ("HINT:" in ep.messages[0]["content"]) == (ep.condition == "hint")
        assert 1 <= ep.turns <= 3 and ep.end_reason in ("terminated", "truncated")
        assert ep.episode_return == max(-1.0, min(1.0, sum(ep.rewards)))
        mask, lp = np.asarray(ep.completion_mask), np.asarray(ep.logprobs)
        assert (lp[mask == 0] == 0).all() and (lp[mask == 1] <= 0).all()
        assert mask.sum() == sum(b - a for a, b in ep.turn_spans) and (mask == 0).any() == (ep.turns > 1)
        replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        for (a, b), reply in zip(ep.turn_spans, replies):  # what the env received is what was sampled
            assert tok.decode(ep.completion_ids[a:b], skip_special_tokens=True).strip() == reply.strip()
    # the recorded log-probs are the model's: one forward pass over a whole multi-turn episode
    ep = max(kept, key=lambda e: e.turns)
    assert ep.turns >= 2
    logits, _ = model(jnp.asarray([ep.prompt_ids + ep.completion_ids], jnp.int32))
    logp = np.asarray(jax.nn.log_softmax(logits[0].astype(jnp.float32), axis=-1))
    p = len(ep.prompt_ids)
    ref = np.asarray([logp[p + i - 1, t] for i, t in enumerate(ep.completion_ids)])
    on = np.asarray(ep.completion_mask) == 1
    np.testing.assert_allclose(np.asarray(ep.raw_logprobs)[on], ref[on], atol=2e-3)


def test_selfplay_step_end_to_end(pool, smollm, tmp_path):
    from spade_jax.selfplay.cycle import SelfPlay

    model, tok, sampler = smollm
    cfg = SelfPlayConfig(
        plays_per_condition=1, envs_per_step=1, designer_delay=0, kinds=("game",),
        corpus=CorpusConfig(max_doc_tokens=64),
        memory=MemoryConfig(n_positive=1, n_negative=0, exemplar_max_chars=600),
        # repair mode trains the (invalid) first attempt at reward 0; resample mode would train none
        designer=DesignerConfig(max_new_tokens=32, context_len=CONTEXT, on_invalid="repair", max_repairs=0),
        hints=HintConfig(source="env_or_model", max_new_tokens=24),  # the seeds' own hint(): deterministic
        rollout=RolloutConfig(max_turns=2, max_new_tokens_per_turn=12, max_episode_tokens=1024),
    )  # fmt: skip
    sp = SelfPlay(cfg, sampler=sampler, tokenizer=tok, pool=pool, run_dir=tmp_path)
    batch = sp.step(0)
    sp.close()

    # designer: prompt rendered with the chat template, holding contract, target, document and an exemplar
    designers = batch.by_role("designer")
    assert len(designers) == 1
    d = designers[0]
    prompt = tok.decode(d.prompt_ids)
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    assert CONTRACT_TEXT.strip()[:300] in prompt and d.meta["skill"] in prompt
    assert "<document>" in prompt and "### Example 1" in prompt
    assert 0 < len(d.completion_ids) <= 32 and all(x <= 0 for x in d.logprobs)
    assert d.group_id == f"designer/0/game/{d.meta['skill']}"
    # its verdict is recorded in the memory (a 32-token design cannot pass the gates)
    row = sp.memory.get(d.meta["record_id"])
    assert row is not None and row.step == 0 and row.verdict_gate == d.meta["gate"] and row.verdict_reason
    assert row.doc_id is not None and row.doc_id.split(":")[0] in ("pydoc", "stdlib")
    text = tok.decode(d.completion_ids, skip_special_tokens=True)
    if row.verdict_gate in ("extract", "static"):
        again = validate_static(text)
        assert (again.valid, again.gate, again.reason) == (False, row.verdict_gate, row.verdict_reason)
    assert d.reward == (batch.envs[0]["designer_reward"] if d.meta["valid"] else 0.0)
    assert batch.stats["design/targets"] == 1

    # the agent played an environment (the design, or one from the archive) with and without its hint
    assert len(sp.state.current) == 1 and len(batch.envs) == 1
    env = batch.envs[0]
    assert env["measured"] and env["n_hint"] == env["n_no_hint"] == 1
    agents = batch.by_role("agent")
    assert [s.group_id for s in agents] == [f"agent/0/{env['env_id']}/no_hint"]  # unhinted plays train the agent
    stored = sp.memory.get(env["env_id"])
    assert stored.win_rate_no_hint == env["win_rate_no_hint"] and stored.plays == 2
    assert (tmp_path / "memory.sqlite").exists()
    for s in batch.samples:  # one mask entry and one log-prob per completion token; the policy's own tokens
        assert len(s.completion_ids) == len(s.completion_mask) == len(s.logprobs) and sum(s.completion_mask) > 0
