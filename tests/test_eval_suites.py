"""Suites end to end with scripted answers (right and wrong), sandboxed code execution, pools, CLI."""

import json
import re

import pytest

from spade_jax.envs.pools import load_pool
from spade_jax.eval.agent import ScriptedModel
from spade_jax.eval.code_exec import run_programs
from spade_jax.eval.code_suites import HumanEvalSuite, humaneval_program, load_humaneval
from spade_jax.eval.core import EvalContext
from spade_jax.eval.games import GamesSuite, game_outcome
from spade_jax.eval.qa_suites import ChampSuite, GPQASuite, MathFileSuite, ReasoningGymSuite
from spade_jax.eval.registry import evaluate, resolve_suites
from spade_jax.eval.sandboxed import InProcessRunner, default_runner


def _user(messages):
    return next(m["content"] for m in messages if m["role"] == "user")


def _answering(items, key="answer", wrong=False):
    table = {}
    for it in items:
        table[it["question"][:200]] = it[key]

    def fn(messages):
        text = _user(messages)
        ans = next(v for q, v in table.items() if q in text)
        return f"Reasoning... \\boxed{{{'0' + ans if wrong else ans}}}"

    return fn


def test_champ_right_and_wrong():
    suite = ChampSuite()
    items = suite.load(6)
    right = suite.run(ScriptedModel(_answering(items)), items, EvalContext())
    assert right.metrics["accuracy"] == 1.0
    wrong = suite.run(ScriptedModel(lambda m: "\\boxed{-12345}"), items, EvalContext())
    assert wrong.metrics["accuracy"] == 0.0


def test_reasoning_gym_right_and_wrong_and_pass_at_k():
    suite = ReasoningGymSuite()
    items = suite.load(8)
    assert len({it["task"] for it in items}) == 8 and len({it["id"] for it in items}) == 8
    assert suite.load(8) == items  # fixed held-out set
    right = suite.run(ScriptedModel(_answering(items)), items, EvalContext(samples=3))
    assert right.metrics["accuracy"] == 1.0 and right.metrics["pass@3"] == 1.0
    wrong = suite.run(ScriptedModel(lambda m: "\\boxed{not it}"), items, EvalContext())
    assert wrong.metrics["accuracy"] == 0.0


def test_user_file_suites(tmp_path):
    aime = tmp_path / "aime.jsonl"
    aime.write_text('{"id": "a1", "problem": "What is 6*7?", "answer": "42"}\n{"problem": "1+1?", "answer": "2"}\n')
    suite = MathFileSuite(str(aime), "aime")
    items = suite.load()
    res = suite.run(ScriptedModel(lambda m: "\\boxed{42}"), items, EvalContext())
    assert [i.passed for i in res.items] == [[True], [False]]

    gpqa = tmp_path / "gpqa.csv"
    gpqa.write_text(
        "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
        "Which is a noble gas?,Neon,Sodium,Iron,Carbon\n"
    )
    suite = GPQASuite(str(gpqa))
    item = suite.load()[0]

    def pick(messages, want="Neon"):
        options = dict(re.findall(r"\(([A-D])\) (\w+)", _user(messages)))
        letter = next(k for k, v in options.items() if v == want)
        return f"\\boxed{{{letter}}}"

    assert suite.run(ScriptedModel(pick), [item], EvalContext()).metrics["accuracy"] == 1.0
    assert suite.run(ScriptedModel(lambda m: pick(m, "Iron")), [item], EvalContext()).metrics["accuracy"] == 0.0
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a GPQA CSV"):
        GPQASuite(str(bad)).load()
    with pytest.raises(FileNotFoundError):
        MathFileSuite(str(tmp_path / "missing.jsonl")).load()


@pytest.mark.sandbox
def test_humaneval_in_sandbox():
    problems = load_humaneval()[:3]
    canonical = [p["prompt"] + p["canonical_solution"] for p in problems]
    runner = default_runner("auto", 2)
    try:
        good = run_programs(runner, [humaneval_program(p, f"```python\n{c}\n```") for p, c in zip(problems, canonical)])
        assert [r.passed for r in good] == [True, True, True], good
        body_only = run_programs(runner, [humaneval_program(problems[0], problems[0]["canonical_solution"])])
        assert body_only[0].passed
        wrong = f"```python\ndef {problems[0]['entry_point']}(*a, **k):\n    return None\n```"
        hang = f"```python\ndef {problems[1]['entry_point']}(*a, **k):\n    while True:\n        pass\n```"
        bad = run_programs(runner, [humaneval_program(problems[0], wrong), humaneval_program(problems[1], hang)])
        assert not bad[0].passed and bad[0].error == "exception"
        assert not bad[1].passed and bad[1].error == "timeout"
        suite = HumanEvalSuite()
        by_prompt = {p["prompt"]: c for p, c in zip(problems, canonical)}
        model = ScriptedModel(lambda m: "```python\n" + next(c for q, c in by_prompt.items() if q in _user(m)) + "```")
        res = suite.run(model, problems, EvalContext(runner_factory=lambda: runner, samples=2))
        assert res.metrics["pass@1"] == 1.0 and res.metrics["pass@2"] == 1.0
    finally:
        runner.close()


def test_textarena_games_win_and_lose():
    import textarena as ta

    suite = GamesSuite(games=("TowerOfHanoi-v0",))
    items = suite.load(2)
    moves = iter([])

    def solver(messages):
        nonlocal moves
        if len(messages) == 2:  # a new game: replay the optimal 7 moves
            moves = iter(["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"])
        return next(moves)

    res = suite.run(ScriptedModel(solver), items[:1], EvalContext())
    assert res.metrics["win_rate"] == 1.0
    res = suite.run(ScriptedModel(lambda m: "[A B]"), items[:1], EvalContext())  # second move is illegal
    assert res.metrics["win_rate"] == 0.0
    env = ta.make("GuessTheNumber-v0")
    env.reset(num_players=1, seed=1)
    assert game_outcome(env.close()) is None  # unfinished game


@pytest.mark.parametrize("game", ["Countdown-v0", "Cryptarithm-v0", "GuessTheNumber-v0"])
def test_an_invalid_move_scores_a_number(game: str):
    """textarena swaps reward and reason for some games' invalid moves; the outcome must still be a score."""
    import textarena as ta

    env = ta.make(game)
    env.reset(num_players=1, seed=1)
    done = False
    for _ in range(5):  # games allow a few invalid moves before they end the episode
        done, _ = env.step("no action in brackets here")
        if done:
            break
    assert done
    outcome = game_outcome(env.close())
    assert isinstance(outcome, float) and 0.0 <= outcome < 1.0


def test_every_listed_game_starts_offline():
    import textarena as ta

    from spade_jax.eval.games import GAMES

    for game in GAMES:
        env = ta.make(game)
        env.reset(num_players=1, seed=3)
        _pid, obs = env.get_observation()
        assert isinstance(obs, str) and obs.strip(), game


@pytest.mark.parametrize("pool", ["seeds", "textarena", "reasoning_gym"])
def test_pools_are_valid_environments(pool):
    from spade_jax.gates.sandboxed import validate_static

    specs = load_pool(pool)
    assert len(specs) >= 3
    runner = InProcessRunner()
    for spec in specs[:6]:
        assert validate_static(spec.source).valid, spec.name
        if spec.kind == "tool":
            continue
        session = runner.open(spec.source, {"max_turns": 25})
        obs = session.reset(5)
        assert obs.ok and obs.value[0].strip(), (spec.name, obs.message)
        for _ in range(25):  # the reference policy wins
            action = session.call("reference_action").value
            step = session.step(action)
            assert step.ok, step.message
            if step.value[2] or step.value[3]:
                break
        assert step.value[4]["won"], spec.name


def test_pool_directory_and_errors(tmp_path):
    from spade_jax.envs.seeds import load_seed_source

    (tmp_path / "a.py").write_text(load_seed_source("number_target"))
    specs = load_pool(str(tmp_path))
    assert [s.kind for s in specs] == ["game"]
    with pytest.raises(ValueError, match="unknown pool"):
        load_pool("nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no .py"):
        load_pool(str(empty))


def test_reasoning_gym_pool_is_disjoint_from_eval_set():
    pool_questions = set()
    for spec in load_pool("reasoning_gym")[:5]:
        ns = {}
        exec(compile(spec.source, spec.name, "exec"), ns)
        pool_questions |= {q for q, _ in ns["ITEMS"]}
    eval_questions = {it["question"] for it in ReasoningGymSuite().load(100)}
    assert len(eval_questions & pool_questions) <= 2  # tiny generators (e.g. gcd of small numbers) may collide


def test_registry_and_cli(tmp_path, capsys):
    from spade_jax.cli import main

    assert resolve_suites("code,math") == ["humaneval", "champ"]
    assert len(resolve_suites("tool")) == 4
    with pytest.raises(ValueError, match="unknown suite"):
        resolve_suites("nonsense")
    items_model = ScriptedModel(lambda m: "\\boxed{0}", name="zero")
    a = evaluate(items_model, ["champ"], EvalContext(), limit=3)
    b = json.loads(json.dumps(a))
    b["suites"]["champ"]["metrics"]["accuracy"] = 0.5
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["eval-compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "champ" in out and "+0.500" in out
    assert main(["eval-compare", str(tmp_path / "a.json"), str(tmp_path / "missing.json")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["eval", "--model", "smollm2-135m", "--suite", "bogus"]) == 2
    assert "unknown suite" in capsys.readouterr().err
