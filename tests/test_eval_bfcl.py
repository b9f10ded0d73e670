"""BFCL multi-turn: ground truth scores full marks, deliberately wrong sequences fail, the agent loop works."""

import ast
import json

import pytest

from spade_jax.eval.agent import ScriptedModel
from spade_jax.eval.bfcl import BfclSuite, ground_truth_check
from spade_jax.eval.bfcl_backend import ground_truth_steps, score_calls
from spade_jax.eval.bfcl_data import call_string, function_docs, load_bfcl, to_tool_schema
from spade_jax.eval.core import EvalContext
from spade_jax.eval.sandboxed import InProcessRunner, default_runner


@pytest.fixture(scope="module")
def runner():
    return InProcessRunner()


def test_ground_truth_full_marks_in_process(runner):
    for cat in ("base", "miss_func", "miss_param", "long_context"):
        got = ground_truth_check(runner, cat, limit=12)
        assert got["passed"] == got["total"] == 12, got["failures"][:2]


def test_deliberately_wrong_sequences_fail(runner):
    item = load_bfcl("base", 1)[0]  # turn 0: cd document, mkdir temp, mv final_report.pdf temp
    steps = ground_truth_steps(item)
    assert score_calls(runner, item, steps)["valid"]

    renamed = json.loads(json.dumps(steps))
    renamed[0][0][1] = "mkdir(dir_name='tmp')"  # wrong directory name: the file system state differs
    verdict = score_calls(runner, item, renamed)
    assert not verdict["valid"] and verdict["error_type"] == "multi_turn:instance_state_mismatch"
    assert verdict["turn"] == 0

    no_grep = json.loads(json.dumps(steps))
    no_grep[1][0] = ["cd(folder='temp')"]  # the grep result the user asked for is never produced
    verdict = score_calls(runner, item, no_grep)
    assert not verdict["valid"] and verdict["error_type"] == "multi_turn:execution_response_mismatch"

    silent = json.loads(json.dumps(steps))
    silent[2] = []  # the agent does nothing in turn 2
    verdict = score_calls(runner, item, silent)
    assert not verdict["valid"] and verdict["error_type"] == "multi_turn:empty_turn_model_response"

    assert not score_calls(runner, item, steps[:-1])["valid"]  # a missing turn = force-terminated


def test_corrupted_ground_truth_mostly_fails(runner):
    bad = ground_truth_check(runner, "base", limit=20, wrong=True)
    assert bad["total"] - bad["passed"] >= 18


def test_schemas_and_call_strings():
    docs = function_docs(["MathAPI"])
    schema = to_tool_schema(docs[0])["function"]
    assert schema["parameters"]["type"] == "object"
    assert all(p.get("type") != "float" for p in schema["parameters"]["properties"].values())
    assert call_string("mv", {"source": "a.txt", "destination": "b"}) == "mv(source='a.txt', destination='b')"
    with pytest.raises(ValueError):
        call_string("os.system", {})


def _as_tool_call(call: str, docs: dict) -> str:
    node = ast.parse(call, mode="eval").body
    names = list(docs[node.func.id]["parameters"]["properties"])
    args = {names[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return "<tool_call>" + json.dumps({"name": node.func.id, "arguments": args}) + "</tool_call>"


def test_agent_loop_with_ground_truth_policy(runner):
    """A scripted agent that sends BFCL's ground-truth calls as <tool_call> JSON passes every entry."""
    items = load_bfcl("miss_func", 6)
    by_first_user = {}
    for it in items:
        docs = {d["name"]: d for d in function_docs(it.involved_classes)}
        by_first_user[it.turns[0][0]["content"]] = (it, docs)

    def policy(messages):
        it, docs = by_first_user[next(m["content"] for m in messages if m["role"] == "user")]
        turn_openers = [m for m in messages if m["role"] == "user" and not m["content"].startswith("<tool_response>")]
        turn = len(turn_openers) - 1
        last = messages[-1]
        if last["role"] == "user" and not last["content"].startswith("<tool_response>"):
            calls = it.ground_truth[turn]
            if calls:
                return "\n".join(_as_tool_call(c, docs) for c in calls)
        return "Done."

    suite = BfclSuite("miss_func")
    result = suite.run(ScriptedModel(policy), items, EvalContext(runner_factory=lambda: runner))
    assert result.metrics["accuracy"] == 1.0, [i.extra for i in result.items]

    lazy = suite.run(ScriptedModel(lambda m: "I cannot help."), items[:2], EvalContext(runner_factory=lambda: runner))
    assert lazy.metrics["accuracy"] == 0.0


@pytest.mark.sandbox
def test_ground_truth_in_sandbox():
    sandboxed = default_runner("auto", 2)
    try:
        assert sandboxed.level in ("gvisor", "bwrap", "process")
        got = ground_truth_check(sandboxed, "base", limit=4)
        assert got["passed"] == 4, got["failures"]
        bad = ground_truth_check(sandboxed, "long_context", limit=3, wrong=True)
        assert bad["passed"] < 3
    finally:
        sandboxed.close()
