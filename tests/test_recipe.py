"""The paper's recipe, checkable: docs/recipe.md is generated from the presets and current; every row we claim
to match does; the reference's observation wrapper, action parsing, per-role thinking switch, sampling
filters and word-counted document cut reach the code paths that use them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest

from spade_jax.config.overrides import ConfigError
from spade_jax.config.run import RUN_PRESETS, load_run_config
from spade_jax.config.selfplay import REFERENCE_OBSERVATION_TEMPLATE, DesignerConfig, HintConfig, RolloutConfig
from spade_jax.envs.base import canonical_action, extract_boxed, reference_boxed_answer
from spade_jax.model.presets import load_preset
from spade_jax.selfplay.corpus import truncate_document
from spade_jax.selfplay.designer import Designer
from spade_jax.selfplay.hints import HintWriter
from spade_jax.selfplay.policies import ModelPolicy, TurnRequest

QWEN3_TEMPLATE = (Path(__file__).parent / "data" / "qwen3_chat_template.jinja").read_text()
EMPTY_THINK = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
POOL_CALL_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def qwen_tok(tokenizer):
    """The embedded tokenizer (ChatML tokens, like Qwen3's) with Qwen3's hybrid-thinking chat template."""
    tok = copy.copy(tokenizer)
    tok.chat_template = QWEN3_TEMPLATE
    return tok


# ------------------------------------------------------------------------------------------ docs/recipe.md


def test_recipe_doc_is_generated_and_current():
    from spade_jax.config.recipe import DOC_PATH, render

    stale = "docs/recipe.md is stale: python -m spade_jax.config.recipe"
    assert DOC_PATH.read_text(encoding="utf-8") == render(), stale


def test_every_matching_row_matches_its_script():
    from spade_jax.config.recipe import FACTS, comparisons

    pairs = comparisons()
    bad = [(f.flag, script, preset, ref, ours) for f, script, preset, ref, ours in pairs if ref != ours]
    assert not bad
    assert len({f.flag for f, *_ in pairs}) >= 45 and len(FACTS) >= 50
    keys = {f.key for f, *_ in pairs}
    for key in ("selfplay.rollout.top_k", "selfplay.hints.max_new_tokens", "selfplay.corpus.max_doc_words",
                "learner.kl_coef", "selfplay.rollout.observation_template", "selfplay.designer_delay"):  # fmt: skip
        assert key in keys


def test_differences_and_points_name_real_keys_and_tests():
    """The "Where we differ on purpose" and point-by-point sections: every switch and key is a field of the
    paper presets, every difference is safety, signal or named, and every test the document names exists."""
    from spade_jax.config.recipe import _MISSING, DIFFERENCES, POINTS, preset_value

    cfg = load_run_config("paper-qwen3-4b")
    assert len(POINTS) == 14 and {d.kind for d in DIFFERENCES} == {"safety", "signal", "named"}
    for d in DIFFERENCES:
        assert not d.switch or preset_value(cfg, d.switch) is not _MISSING, d.switch
    root = Path(__file__).resolve().parents[1]
    for _, keys, test in POINTS:
        path, _, name = test.partition("::")
        assert (root / path).exists() and (not name or f"def {name}(" in (root / path).read_text()), test
        for key in keys.split(", "):
            assert key.endswith("*") or preset_value(cfg, key) is not _MISSING, key
    assert load_run_config("paper-qwen3-4b", ["selfplay.signal=strict"]).selfplay.strict  # one override


# ------------------------------------------------------------------------------------------------ presets


def test_paper_presets_carry_the_recipe():
    four = load_run_config("paper-qwen3-4b")
    sp = four.selfplay
    assert four.model == "qwen3-4b-instruct-2507"
    assert (sp.rollout.max_new_tokens_per_turn, sp.rollout.max_episode_tokens) == (8192, 32768)
    assert (sp.rollout.temperature, sp.rollout.top_p, sp.rollout.top_k) == (0.6, 0.95, 20)
    assert (sp.designer.temperature, sp.designer.top_p, sp.designer.top_k) == (0.6, 0.95, 20)
    assert (sp.hints.temperature, sp.hints.max_new_tokens) == (0.3, 4096)
    assert sp.corpus.max_doc_words == 6000 and sp.rollout.max_turns == 25 and sp.envs_per_step == 24
    assert sp.rollout.observation_template == REFERENCE_OBSERVATION_TEMPLATE
    assert sp.rollout.action_parsing == "reference" and not sp.rollout.enable_thinking
    ln = four.learner
    assert (ln.lr, ln.schedule, ln.weight_decay, ln.betas, ln.clip_low, ln.clip_high) == (
        1e-6, "constant", 0.1, (0.9, 0.98), 0.2, 0.28)  # fmt: skip
    assert ln.kl_coef == 0.0 and load_run_config("paper-qwen3-30b-a3b").learner.kl_coef == 0.0
    eight = load_run_config("paper-qwen3-8b")
    assert eight.learner.kl_coef == 0.005 and eight.selfplay.rollout.enable_thinking
    # the reference's code renders the designer, the hint writer and the hinted plays without thinking
    assert not (eight.selfplay.designer.enable_thinking or eight.selfplay.hints.enable_thinking)
    assert eight.selfplay.rollout.hinted_enable_thinking is False
    assert eight.selfplay.rollout.thinking_turns == "rerender" and sp.rollout.thinking_turns == "sequence"
    for name in ("paper-qwen3-4b-tool", "paper-qwen3-30b-a3b-tool"):
        tool = load_run_config(name)
        assert tool.selfplay.kinds == ("tool",) and tool.learner.kl_coef == 0.005
        assert (tool.selfplay.regen_interval, tool.selfplay.designer_delay) == (8, 8)
        assert (tool.selfplay.hints.max_new_tokens, tool.selfplay.corpus.max_doc_words) == (2048, 4000)
    assert load_run_config("paper-qwen3-4b-tool").model == "qwen3-4b-instruct-2507"
    assert {"paper-qwen3-4b", "paper-qwen3-8b", "paper-qwen3-30b-a3b"} <= set(RUN_PRESETS)


def test_role_norm_is_a_validated_option():
    assert load_run_config("demo").loop.role_norm == "std"
    assert load_run_config("paper-qwen3-4b").loop.role_norm == "none"
    with pytest.raises(ConfigError, match="loop.role_norm"):
        load_run_config("demo", ["loop.role_norm=bogus"])


def test_qwen3_4b_instruct_2507_preset():
    p = load_preset("qwen3-4b-instruct-2507")
    m, hybrid = p.model, load_preset("qwen3-4b").model
    assert p.weights == "hf:Qwen/Qwen3-4B-Instruct-2507"
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == (36, 2560, 32, 8, 128)
    assert (m.intermediate_size, m.vocab_size, m.tie_embeddings, m.rms_norm_eps) == (9728, 151936, True, 1e-6)
    assert (m.rope_theta, m.max_position_embeddings) == (5_000_000.0, 262144)
    assert hybrid.rope_theta == 1_000_000.0  # the hybrid-thinking Qwen3-4B stays available


# ---------------------------------------------------------------------------------- thinking switch


def test_qwen3_template_thinking_switch(qwen_tok):
    msgs = [{"role": "user", "content": "hi"}]
    off = qwen_tok.apply_chat_template(msgs, enable_thinking=False)
    on = qwen_tok.apply_chat_template(msgs, enable_thinking=True)
    assert off == "<|im_start|>user\nhi<|im_end|>\n" + EMPTY_THINK
    assert on == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


class _Recorder:
    """A sampler stand-in: records prompts and SamplingParams, answers a fixed text."""

    max_total_len = 4096

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def generate(self, prompts, params):
        self.calls.append((prompts, params))
        return [SimpleNamespace(text="Use binary search.", token_ids=[1], logprobs=[0.0], raw_logprobs=[0.0],
                                finish_reason="eos") for _ in prompts]  # fmt: skip


def test_roles_render_thinking_and_pass_top_k(qwen_tok):
    rec = _Recorder(qwen_tok)
    writer = HintWriter(rec, qwen_tok, HintConfig(top_k=7, top_p=0.9, enable_thinking=False, max_new_tokens=32))
    writer.write([("class X: pass", "game")])
    prompts, params = rec.calls[-1]
    assert (params.top_k, params.top_p) == (7, 0.9)
    assert qwen_tok.decode(prompts[0]).endswith(EMPTY_THINK)
    HintWriter(rec, qwen_tok, HintConfig(enable_thinking=True, max_new_tokens=32)).write([("class X: pass", "game")])
    assert not qwen_tok.decode(rec.calls[-1][0][0]).endswith(EMPTY_THINK)

    policy = ModelPolicy(rec, qwen_tok, temperature=0.6, top_p=0.95, top_k=20)
    policy.act([TurnRequest(0, [1, 2], [], 16, (), None, None, 0)])
    assert (rec.calls[-1][1].top_k, rec.calls[-1][1].top_p) == (20, 0.95)

    for thinking in (False, True):
        designer = SimpleNamespace(config=DesignerConfig(top_k=20, top_p=0.95, enable_thinking=thinking),
                                   tokenizer=qwen_tok, sampler=rec, max_new_tokens=32, seed=0, calls=0)  # fmt: skip
        ids = Designer.encode(designer, [{"role": "user", "content": "design"}])
        assert qwen_tok.decode(ids).endswith(EMPTY_THINK) is not thinking
        Designer._generate(designer, [ids], 0)
        assert rec.calls[-1][1].top_k == 20


# ------------------------------------------------------------------------------- observation + actions

# (reply, the reference's extract_boxed_answer, the reference's parse_action): computed by running
# spade/core/utils/parsing.py on each reply.
PARSING_CASES = [
    (r"I think \boxed{up}", "up", r"\boxed{up}"),
    (r"\boxed{ 42 }", "42", r"\boxed{42}"),
    (r"first \boxed{a} then \boxed{b}", "a", r"\boxed{a}"),  # several boxes: the first flat one
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}", r"\boxed{\frac{1}{2}}"),  # nested braces: balanced match
    (r"\boxed{\frac{1}{2}} or maybe \boxed{3}", "3", r"\boxed{3}"),  # a later flat box wins over a nested one
    (r"\boxed{x^{2}} \boxed{y^{3}}", "y^{3}", r"\boxed{y^{3}}"),  # no flat box: the last box
    (r"\boxed{{x}}", "x", r"\boxed{x}"),
    (r"\boxed{{{y}}}", "y", r"\boxed{y}"),
    (r"\boxed{{a}{b}}", "a}{b", r"\boxed{a}{b}"),
    (r"\boxed{}", "", r"\boxed{}"),  # empty: the reply itself goes to step()
    (r"\boxed{   }", "", r"\boxed{   }"),
    ("no box here", None, "no box here"),
    ("  spaced reply  ", None, "spaced reply"),
    (r"\boxed{abc", None, r"\boxed{abc"),  # unclosed
    (r"\boxed {left}", "left", r"\boxed{left}"),
    (r"\boxed{\text{up}}", r"\text{up}", r"\boxed{\text{up}}"),
    (r"\boxed{a} and \boxed{\text{b}}", "a", r"\boxed{a}"),
    (r"\fbox{7}", None, r"\fbox{7}"),
    ("", None, ""),
]


@pytest.mark.parametrize(("reply", "answer", "action"), PARSING_CASES)
def test_action_parsing_matches_the_reference(reply, answer, action):
    assert reference_boxed_answer(reply) == answer
    assert canonical_action(reply) == action


def test_our_parsing_differs_where_the_reference_reads_the_first_box():
    assert extract_boxed(r"first \boxed{a} then \boxed{b}") == "b"  # ours (default "raw"): the last box


def test_reference_observation_wrapper_text():
    assert REFERENCE_OBSERVATION_TEMPLATE.format(observation="OBS") == (
        "You are playing a language game. Make valid actions to win.\nObservation: OBS\n"
        "Please reason step by step, and put your final answer within \\boxed{}."
    )


def test_rollouts_wrap_the_first_observation_and_parse_like_the_reference(pool, qwen_tok):
    from spade_jax.envs.contract import contract_examples
    from spade_jax.selfplay.rollouts import EpisodeSpec, RolloutEngine, ScriptedPolicy

    source = contract_examples()["game"]
    reply = r"I guess \boxed{50}, or rather \boxed{fifty}"
    outcomes = {}
    for parsing in ("raw", "reference"):
        cfg = RolloutConfig(max_turns=2, observation_template=REFERENCE_OBSERVATION_TEMPLATE,
                            action_parsing=parsing, enable_thinking=False)  # fmt: skip
        engine = RolloutEngine(pool, ScriptedPolicy(lambda r: reply), qwen_tok, cfg)
        ep = engine.run([EpisodeSpec("higher_lower", source, 3, "hint", hint="Binary search.")]).episodes[0]
        engine.close()
        assert not ep.discarded, ep.messages
        first = ep.messages[0]["content"]
        assert first.startswith("You are playing a language game. Make valid actions to win.\nObservation: I picked")
        assert first.endswith("HINT: Binary search.\nPlease reason step by step, and put your final answer "
                              "within \\boxed{}.")  # fmt: skip
        assert qwen_tok.decode(ep.prompt_ids).endswith(EMPTY_THINK)
        assert "Observation:" not in ep.messages[2]["content"]  # later observations are not wrapped
        a, _ = ep.turn_spans[1]
        assert qwen_tok.decode(ep.completion_ids[:a]).endswith(EMPTY_THINK)
        outcomes[parsing] = ep.messages[2]["content"]
    assert outcomes["raw"].startswith("Invalid guess")  # ours reads the last box, "fifty"
    assert outcomes["reference"].startswith("50")  # the reference reads the first flat box


def test_corpus_cuts_whitespace_words():
    text = " ".join(f"w{i}" for i in range(50)) + "\n\n" + "tail " * 10
    doc = truncate_document({"id": "d", "text": text}, 0, None, max_words=20)
    assert doc.truncated and doc.text.split() == [f"w{i}" for i in range(20)]
    same = truncate_document({"id": "d", "text": "a  b\nc"}, 0, None, max_words=3)
    assert same.text == "a  b\nc" and not same.truncated
