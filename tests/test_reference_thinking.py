"""The reference's 8B thinking agent (issue 45, point 11): every turn's prompt is the chat template's rendering of
the conversation so far (Qwen3's template drops the think blocks of earlier turns), every turn is its own
training sample carrying the episode's reward, and the turns of one episode share one token mean in the loss
(orchestrator.py _play_game_thinking_async, slime trajectory_converter.py fan_out_thinking_sample). Checked
against a re-render by the chat template itself (Qwen3's, on the embedded tokenizer), with a real sandboxed
environment and a scripted agent. Also the 8B designer's budget of 20,000 tokens.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from spade_jax.config.run import load_run_config
from spade_jax.config.selfplay import REFERENCE_OBSERVATION_TEMPLATE, DesignerConfig, MemoryConfig, RolloutConfig
from spade_jax.run.learn import BatchRule, to_train_samples
from spade_jax.selfplay.batch import SelfPlayBatch, agent_samples
from spade_jax.selfplay.designer import Designer
from spade_jax.selfplay.episodes import EpisodeSpec
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.rollouts import RolloutEngine, ScriptedPolicy

POOL_WORKERS = 1
QWEN3_TEMPLATE = (Path(__file__).parent / "data" / "qwen3_chat_template.jinja").read_text()
ECHO = """
class EchoEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "Say three numbers, one a turn, as \\\\boxed{n}.", {}

    def step(self, action):
        self.turn += 1
        done = self.turn >= 3
        return f"got {action}", (1.0 if done else 0.0), done, False, {}
"""


@pytest.fixture(scope="module")
def qwen_tok(tokenizer):
    tok = copy.copy(tokenizer)
    tok.chat_template = QWEN3_TEMPLATE
    return tok


def _reply(req) -> str:
    return f"<think>\nreasoning {req.turn}\n</think>\n\n\\boxed{{{req.turn}}}"


def test_thinking_turns_are_rerendered_and_trained_one_by_one(pool, qwen_tok):
    cfg = RolloutConfig(max_turns=5, enable_thinking=True, thinking_turns="rerender",
                        observation_template=REFERENCE_OBSERVATION_TEMPLATE)  # fmt: skip
    engine = RolloutEngine(pool, ScriptedPolicy(_reply), qwen_tok, cfg)
    try:
        (ep,) = engine.run([EpisodeSpec("echo", ECHO, 7)]).episodes
    finally:
        engine.close()
    assert ep.end_reason == "terminated" and ep.turns == 3 and ep.episode_return == 1.0
    assert [m["content"] for m in ep.messages if m["role"] == "user"][1:] == ["got \\boxed{0}", "got \\boxed{1}"]
    eos = qwen_tok.eos_ids[0]
    for i in range(3):
        history = ep.messages[: 2 * i + 1]  # the first observation, then (reply, observation) pairs
        text = qwen_tok.apply_chat_template(history, add_generation_prompt=True, enable_thinking=True)
        assert ep.turn_prompts[i] == qwen_tok.encode(text, add_special_tokens=False)
        rendered = qwen_tok.decode(ep.turn_prompts[i])
        assert all(f"reasoning {k}" not in rendered for k in range(i))  # earlier think blocks dropped
        assert all(f"\\boxed{{{k}}}" in rendered for k in range(i))  # their answers kept
    samples = agent_samples([ep], step=4)
    assert len(samples) == 3 and len({s.turn_of for s in samples}) == 1 and samples[0].turn_of
    for i, s in enumerate(samples):
        reply = qwen_tok.encode(_reply(type("R", (), {"turn": i})()), add_special_tokens=False) + [eos]
        assert list(s.prompt_ids) == ep.turn_prompts[i] and list(s.completion_ids) == reply
        assert list(s.completion_mask) == [1] * len(reply) and s.reward == 1.0 and s.meta["turn"] == i

    # the episode counts once in the global batch and its turns share one token mean: each token weighs
    # 1 / (all the episode's reply tokens x G); a second, lost episode of the group gives the z-scores +1 / -1
    lost = [dataclasses.replace(s, reward=0.0, turn_of="other") for s in samples]
    rule = BatchRule(policy="reference", global_batch=2, loss_agg="sample_mean_fixed", role_norm="none")
    out, stats = to_train_samples(SelfPlayBatch(agent=(*samples, *lost)), rule)
    tokens = sum(len(s.completion_ids) for s in samples)
    assert stats["train/batch_cut"] == 0 and stats["train/batch_duplicates"] == 0 and len(out) == 6
    assert [s.advantage for s in out] == pytest.approx([1.0] * 3 + [-1.0] * 3)
    assert all(s.loss_weight == pytest.approx(1 / (tokens * 2)) for s in out)


def test_8b_designer_budget_survives(tokenizer):
    """--spade-env-max-tokens 20000 goes to the sampler as is; ours cut it to max_total_len // 2 = 16,384."""
    cfg = load_run_config("paper-qwen3-8b").selfplay.designer
    designer = Designer(None, tokenizer, None, Memory(":memory:", MemoryConfig(seed_from_library=False)), cfg)
    assert (cfg.max_new_tokens, designer.context_len, designer.max_new_tokens) == (20000, 32768, 20000)
    small = Designer(None, tokenizer, None, Memory(":memory:"), DesignerConfig(context_len=4096))
    assert small.max_new_tokens == 2048  # a small context keeps half for the prompt
