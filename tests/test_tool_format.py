"""Tool schemas and tool results in the model's own chat template (`tools=`, `role: "tool"`) when it renders them;
the environment's textual tool list otherwise ("text", SmolLM2's ChatML). Agent episodes through the real host
pool (scripted policies) and BFCL prompt building; the tokens the sampler saw are what the template renders.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from spade_jax.config.selfplay import RolloutConfig
from spade_jax.envs.base import TOOL_INSTRUCTIONS
from spade_jax.envs.seeds import load_seed_class, load_seed_source
from spade_jax.eval.agent import ChatModel, ScriptedModel
from spade_jax.eval.bfcl import INSTRUCTIONS, BfclSuite, native_tools
from spade_jax.eval.bfcl_data import ADD_FUNCTIONS_PROMPT, function_docs, load_bfcl, render_tools, to_tool_schema
from spade_jax.eval.core import EvalContext
from spade_jax.eval.sandboxed import InProcessRunner
from spade_jax.model.chat_template import renders_tools
from spade_jax.selfplay.rollouts import EpisodeSpec, RolloutEngine, ScriptedPolicy, TurnRequest

QWEN3_TEMPLATE = (Path(__file__).parent / "data" / "qwen3_chat_template.jinja").read_text()
ORDER_CANCEL = load_seed_source("order_cancel")
THINK_OPEN = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
POOL_CALL_TIMEOUT_S = 5.0  # for the `pool` fixture in conftest.py

NO_TOOL_INFO = """
from spade_jax.envs.base import ToolEnv, tool


class Bare(ToolEnv):
    KIND = "tool"
    SKILL = "arithmetic"
    NAME = "bare"

    def setup(self):
        return "What is 2 + 2? Use the tool."

    @tool("Adds two integers.", a="first", b="second")
    def add(self, a: int, b: int) -> int:
        return a + b

    def check_answer(self, answer):
        return answer.strip() == "4"

    def reset(self, seed=None):  # an env that gives no schemas apart from its text: the text fallback
        obs, info = super().reset(seed)
        return obs, {k: v for k, v in info.items() if k not in ("task", "tools", "instructions")}
"""


@pytest.fixture(scope="module")
def qwen_tok(tokenizer):
    """The embedded tokenizer (ChatML tokens, like Qwen3's) with Qwen3's chat template (tools, tool messages)."""
    tok = copy.copy(tokenizer)
    tok.chat_template = QWEN3_TEMPLATE
    return tok


def _schemas(seed: int = 3) -> list[dict]:
    env = load_seed_class("order_cancel")()
    return env.reset(seed)[1]["tools"]


def _order_agent(req: TurnRequest) -> str:
    """Turn 0 a tool call, 1 no action (format reminder), 2 a failing tool call, 3 a wrong answer."""
    customer = re.search(r"Customer (\w+)", req.messages[-1 - 2 * req.turn]["content"]).group(1)
    return [
        f'<tool_call>{{"name": "find_orders", "arguments": {{"customer": "{customer}"}}}}</tool_call>',
        "Let me think about it.",
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "O999"}}</tool_call>',
        "<answer>0</answer>",
    ][req.turn]


def _play(pool, tokenizer, specs, **cfg):
    seen: list[TurnRequest] = []

    def agent(req: TurnRequest) -> str:
        seen.append(copy.copy(req))
        return _order_agent(req) if req.spec.env_id == "order_cancel" else "<answer>4</answer>"

    engine = RolloutEngine(pool, ScriptedPolicy(agent), tokenizer, RolloutConfig(max_turns=6, **cfg))
    try:
        result = engine.run(specs)
    finally:
        engine.close()
    assert not any(e.discarded for e in result.episodes), [e.messages[-1] for e in result.episodes]
    return result, seen


def test_probe_detects_tool_support(tokenizer, qwen_tok):
    from spade_jax.model.tokenizer import Tokenizer

    assert qwen_tok.supports_tools() and renders_tools(QWEN3_TEMPLATE)
    assert not tokenizer.supports_tools()  # SmolLM2's ChatML ignores tools=
    assert not Tokenizer.byte_level().supports_tools()
    assert not renders_tools("{{ raise_exception('no tools here') }}")
    tools_only = "{% for t in tools or [] %}{{ t.function.name }}{% endfor %}"  # tools but no tool results
    assert not renders_tools(tools_only)


@pytest.mark.parametrize("thinking", [True, False])
def test_qwen3_tool_episode_uses_the_templates_tool_format(pool, qwen_tok, thinking):
    specs = [EpisodeSpec("order_cancel", ORDER_CANCEL, 3, kind="tool"),
             EpisodeSpec("order_cancel", ORDER_CANCEL, 4, "hint", hint="Cancel only processing orders.",
                         kind="tool")]  # fmt: skip
    result, seen = _play(pool, qwen_tok, specs, enable_thinking=thinking, check_hint_leaks=False)
    for ep in result.episodes:
        schemas = _schemas(ep.spec.seed)
        assert ep.tools == schemas and ep.end_reason == "terminated" and ep.turns == 4
        prompt = qwen_tok.decode(ep.prompt_ids)
        # the template's <tools> block carries the env's schemas; the textual list is gone
        block = "<tools>\n" + "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas) + "\n</tools>"
        assert block in prompt
        assert "Tools:\n" not in prompt and '{"name":"find_orders"' not in prompt
        task = load_seed_class("order_cancel")().reset(ep.spec.seed)[1]["task"]
        first = f"{task}\n\n{TOOL_INSTRUCTIONS}"
        if ep.condition == "hint":
            first += "\n\nHINT: Cancel only processing orders."
        assert ep.messages[0] == {"role": "user", "content": first}
        assert f"<|im_start|>user\n{first}<|im_end|>" in prompt
        # tool results are tool messages (the template's tool-response block); other observations stay user's
        assert [m["role"] for m in ep.messages] == ["user", "assistant", "tool", "assistant", "user",
                                                    "assistant", "tool", "assistant"]  # fmt: skip
        result_text = ep.messages[2]["content"]
        assert result_text.startswith("Result of find_orders: [")
        full = qwen_tok.decode(ep.prompt_ids + ep.completion_ids)
        assert f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{result_text}\n</tool_response><|im_end|>\n" in full
        assert "<tool_response>\nError in get_order: no order O999\n</tool_response>" in full
        # token in, token out: every turn's prompt is the template's rendering of the conversation so far
        assert [r.tools for r in seen if r.spec is ep.spec] == [schemas] * 4
        starts = [a for a, _ in ep.turn_spans]
        for turn, start in enumerate(starts):
            k = 1 + 2 * turn  # messages before this turn's reply
            ids = ep.prompt_ids + ep.completion_ids[:start]
            assert [r.prompt_ids for r in seen if r.spec is ep.spec][turn] == ids
            text = qwen_tok.apply_chat_template(ep.messages[:k], tools=schemas, enable_thinking=thinking)
            if thinking:
                assert qwen_tok.encode(text, add_special_tokens=False) == ids
            else:  # Qwen3 drops earlier turns' empty think blocks on re-render; the sampler saw them
                seen_text = qwen_tok.decode(ids)
                assert seen_text.count(THINK_OPEN) == turn + 1
                earlier, last = seen_text.rsplit(THINK_OPEN, 1)
                assert earlier.replace(THINK_OPEN, "<|im_start|>assistant\n") + THINK_OPEN + last == text
        eos = qwen_tok.decode([qwen_tok.eos_ids[0]])
        for (a, b), m in zip(ep.turn_spans, ep.messages[1::2]):
            assert all(ep.completion_mask[a:b]) and qwen_tok.decode(ep.completion_ids[a:b]) == m["content"] + eos
        assert sum(ep.completion_mask) == sum(b - a for a, b in ep.turn_spans)


def test_textual_tool_list_stays_for_chatml_text_format_and_bare_envs(pool, tokenizer, qwen_tok):
    spec = EpisodeSpec("order_cancel", ORDER_CANCEL, 3, kind="tool")
    bare = EpisodeSpec("bare", NO_TOOL_INFO, 0, kind="tool")
    env_obs = load_seed_class("order_cancel")().reset(3)[0]
    cases = [(tokenizer, "auto", spec), (qwen_tok, "text", spec), (qwen_tok, "auto", bare)]
    for tok, fmt, sp in cases:
        result, seen = _play(pool, tok, [sp], tool_format=fmt)
        ep = result.episodes[0]
        assert ep.tools is None and all(r.tools is None for r in seen)
        assert ep.messages[0]["content"].startswith(env_obs if sp is spec else "What is 2 + 2?")
        assert "\n\nTools:\n{" in ep.messages[0]["content"]
        assert {m["role"] for m in ep.messages} == {"user", "assistant"}
        prompt = tok.decode(ep.prompt_ids)
        assert "<tools>" not in prompt and "\n\nTools:\n{" in prompt
        rendered = tok.apply_chat_template(ep.messages, add_generation_prompt=False)
        if tok is tokenizer:  # ChatML re-renders to exactly the tokens the sampler saw
            assert tok.decode(ep.prompt_ids + ep.completion_ids) + "\n" == rendered


def test_tool_format_is_validated(tokenizer):
    from spade_jax.config.overrides import ConfigError
    from spade_jax.config.run import load_run_config

    assert load_run_config("paper-qwen3-4b-tool").selfplay.rollout.tool_format == "auto"
    assert load_run_config("paper-qwen3-4b-tool", ["selfplay.rollout.tool_format=text"]).selfplay.rollout.tool_format
    with pytest.raises(ConfigError, match="tool_format"):
        load_run_config("paper-qwen3-4b-tool", ["selfplay.rollout.tool_format=xml"])
    with pytest.raises(ValueError, match="tool_format"):
        RolloutEngine(SimpleNamespace(num_workers=1), ScriptedPolicy(str), tokenizer, RolloutConfig(tool_format="xml"))
    with pytest.raises(ValueError, match="bfcl_tool_format"):
        native_tools(ScriptedModel(str), "native")


# ------------------------------------------------------------------------------------------------ BFCL


class _FakeSampler:
    """What a ChatModel needs of a Sampler: renders with the tokenizer's template (recorded), answers with `fn`."""

    def __init__(self, tokenizer, fn):
        self.tokenizer, self.fn = tokenizer, fn
        self.prompts: list[tuple[str, list[dict]]] = []
        self._by_ids: dict[tuple[int, ...], list[dict]] = {}
        self.max_total_len = 1 << 20

    def render_chat(self, messages, *, tools=None):
        text = self.tokenizer.apply_chat_template(list(messages), tools=tools, add_generation_prompt=True)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        self.prompts.append((text, list(messages)))
        self._by_ids[tuple(ids)] = list(messages)
        return ids

    def generate(self, prompts, params):
        return [SimpleNamespace(text=self.fn(self._by_ids[tuple(ids)]), finish_reason="eos", token_ids=[0])
                for ids in prompts]  # fmt: skip


def _as_tool_call(call: str, docs: dict) -> str:
    node = ast.parse(call, mode="eval").body
    names = list(docs[node.func.id]["parameters"]["properties"])
    args = {names[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return "<tool_call>" + json.dumps({"name": node.func.id, "arguments": args}) + "</tool_call>"


def _ground_truth_agent(item):
    """Sends BFCL's ground-truth calls when a turn opens, then ends the turn."""
    docs = {d["name"]: d for d in function_docs(item.involved_classes)}

    def fn(messages: list[dict]) -> str:
        openers = [m for m in messages if m["role"] == "user" and not m["content"].startswith("<tool_response>")]
        last = messages[-1]
        if last["role"] == "user" and not last["content"].startswith("<tool_response>"):
            calls = item.ground_truth[len(openers) - 1]
            if calls:
                return "\n".join(_as_tool_call(c, docs) for c in calls)
        return "Done."

    return fn


@pytest.mark.parametrize("fmt", ["auto", "text"])
def test_bfcl_prompts_in_the_templates_tool_format(qwen_tok, tokenizer, fmt):
    item = next(it for it in load_bfcl("miss_func", 6) if it.id == "multi_turn_miss_func_1")  # mv held out at turn 2
    held = {n for names in item.missed.values() for n in names}
    docs = function_docs(item.involved_classes)
    shown = [to_tool_schema(d) for d in docs if d["name"] not in held]
    added = [to_tool_schema(d) for d in docs if d["name"] in held]
    for tok in (qwen_tok, tokenizer):
        sampler = _FakeSampler(tok, _ground_truth_agent(item))
        model = ChatModel(sampler)
        native = tok is qwen_tok and fmt == "auto"
        assert model.supports_tools == (tok is qwen_tok) and native_tools(model, fmt) == native
        ctx = EvalContext(runner_factory=InProcessRunner, options={"bfcl_tool_format": fmt})
        assert BfclSuite("miss_func").run(model, [item], ctx).metrics["accuracy"] == 1.0
        first, messages = sampler.prompts[0]
        after_call = next((t, m) for t, m in sampler.prompts if m[-1]["role"] != "user" or
                          m[-1]["content"].startswith("<tool_response>"))  # fmt: skip
        arrival = next((t, m) for t, m in sampler.prompts if ADD_FUNCTIONS_PROMPT in m[-1]["content"])
        if native:  # schemas in the template's <tools> block, results in its tool-response block
            assert messages[0] == {"role": "system", "content": INSTRUCTIONS}
            assert "Functions (JSON):" not in first
            assert "<tools>\n" + "\n".join(json.dumps(s, ensure_ascii=False) for s in shown) + "\n</tools>" in first
            text, msgs = after_call
            assert msgs[-1]["role"] == "tool" and msgs[-2]["role"] == "assistant"
            assert f"<|im_start|>user\n<tool_response>\n{msgs[-1]['content']}\n</tool_response><|im_end|>" in text
            text, msgs = arrival  # the held-out functions join the template's tool list
            assert msgs[-1] == {"role": "user", "content": ADD_FUNCTIONS_PROMPT}
            tools_block = re.search(r"<tools>\n(.*?)\n</tools>", text, re.S).group(1)
            assert [json.loads(x) for x in tools_block.split("\n")] == shown + added
        else:  # the textual list in the system prompt, results in a user message
            assert "<tools>" not in first and f"Functions (JSON):\n{render_tools(shown)}" in first
            text, msgs = after_call
            assert msgs[-1]["role"] == "user" and msgs[-1]["content"].startswith("<tool_response>\n")
            assert all(x["role"] in ("system", "user", "assistant") for _t, ms in sampler.prompts for x in ms)
            text, msgs = arrival
            assert msgs[-1]["content"] == f"{render_tools(added)}\n{ADD_FUNCTIONS_PROMPT}"
            assert "<tools>" not in text


def test_scripted_model_keeps_the_textual_format():
    assert not ScriptedModel(str).supports_tools and ScriptedModel(str, supports_tools=True).supports_tools
