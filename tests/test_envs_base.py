"""Base classes of the environment contract: parsing (boxed, tool calls, answers), turn accounting,
truncation, contract errors, tool schemas and dispatch, the contract text and the gymnasium wrapper."""

from __future__ import annotations

import random
import warnings

import pytest
from gymnasium.utils.env_checker import check_env

from spade_jax.envs.base import (
    EPISODE_OVER,
    ContractError,
    GameEnv,
    ReasoningEnv,
    TextEnv,
    ToolEnv,
    ToolError,
    extract_answer,
    extract_boxed,
    parse_tool_call,
    parse_tool_calls,
    tool,
)
from spade_jax.envs.contract import ALLOWED_IMPORTS, CONTRACT_TEXT, KINDS, SKILLS, contract_examples
from spade_jax.envs.gym_wrapper import TextGymEnv

# ------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"\boxed{42}", "42"),
        (r"first \boxed{1} then \boxed{ 2 }", "2"),
        (r"\boxed{f{x}=\frac{1}{2}}", r"f{x}=\frac{1}{2}"),
        (r"\boxed{\text{move left}}", "move left"),
        (r"\boxed {up}", "up"),
        (r"\fbox{7}", "7"),
        (r"\boxed{3} and a broken \boxed{4", "3"),
        (r"\boxed{}", ""),
        ("no box here", None),
        (r"\boxed{unclosed", None),
        (None, None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_parse_tool_calls_variants():
    text = (
        'I will look. <tool_call>{"name": "get", "arguments": {"id": 3}}</tool_call>\n'
        '<tool_call>{"name": "put", "arguments": "{\\"k\\": \\"v\\"}"}</tool_call>'
        '<tool_call>{"name": "ls"}'  # no closing tag, no arguments
    )
    assert parse_tool_calls(text) == [
        {"name": "get", "arguments": {"id": 3}},
        {"name": "put", "arguments": {"k": "v"}},
        {"name": "ls", "arguments": {}},
    ]
    assert parse_tool_call(text) == {"name": "get", "arguments": {"id": 3}}
    assert parse_tool_call("<answer>5</answer>") is None
    fenced = '<tool_call>\n```json\n{"name": "x", "parameters": {"a": 1}}\n```\n</tool_call>'
    assert parse_tool_call(fenced) == {"name": "x", "arguments": {"a": 1}}


@pytest.mark.parametrize(
    "body, reason",
    [
        ("{name: x}", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"arguments": {}}', "no string 'name'"),
        ('{"name": "f", "arguments": [1]}', "must be a JSON object"),
        ('{"name": "f", "arguments": "nope"}', "are not a JSON object"),
    ],
)
def test_parse_tool_call_malformed(body, reason):
    with pytest.raises(ValueError, match=reason):
        parse_tool_call(f"<tool_call>{body}</tool_call>")


def test_extract_answer():
    assert extract_answer("so <answer> 12 </answer>") == "12"
    assert extract_answer("<answer>cut off") == "cut off"
    assert extract_answer("nothing") is None


# -------------------------------------------------------------------------------------------- games


class Guess(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "guess"

    def setup(self):
        self.secret = self.rng.randint(1, 1000)
        return "Guess a number from 1 to 1000, e.g. \\boxed{500}."

    def play(self, command):
        if command == "bad-reward":
            return "x", 5.0, False
        if command == "bad-shape":
            return ("x", 1.0)
        if command == "bad-done":
            return "x", 0.0, "yes"
        if command == str(self.secret):
            return self.win()
        return "Wrong."


def test_game_format_reminder_counts_a_turn_and_truncates():
    env = Guess(max_turns=3)
    obs, info = env.reset(seed=0)
    assert obs.startswith("Guess") and info["turn"] == 0 and info["kind"] == "game"
    obs, reward, term, trunc, info = env.step("I think 5")
    assert "\\boxed{" in obs and "format" in obs.lower()
    assert (reward, term, trunc, info["turn"]) == (0.0, False, False, 1)
    assert env.step(r"\boxed{0}")[:4] == ("Wrong.", 0.0, False, False)
    obs, reward, term, trunc, info = env.step(r"\boxed{0}")
    assert (term, trunc, info["won"]) == (False, True, False) and "Out of turns" in obs
    assert env.step(r"\boxed{1}")[:4] == (EPISODE_OVER, 0.0, True, False)


def test_game_win_and_determinism():
    a, b = Guess(), Guess()
    a.reset(seed=7)
    b.reset(seed=7)
    assert a.secret == b.secret == random.Random("spade-env:7").randint(1, 1000)
    # The hidden state is not the first draw of a policy generator seeded with the same number.
    same = 0
    for seed in range(50):
        a.reset(seed=seed)
        same += a.secret == random.Random(seed).randint(1, 1000)
    assert same <= 1
    obs, reward, term, trunc, info = a.step(f"Let me answer \\boxed{{{a.secret}}}")
    assert (reward, term, trunc, info["won"], info["return"]) == (1.0, True, False, True, 1.0)


@pytest.mark.parametrize(
    "command, message",
    [("bad-reward", "outside \\[-1, 1\\]"), ("bad-shape", "must return str or"), ("bad-done", "must be bool")],
)
def test_contract_errors(command, message):
    env = Guess()
    env.reset(seed=0)
    with pytest.raises(ContractError, match=message):
        env.step(f"\\boxed{{{command}}}")


def test_setup_must_return_text_and_max_turns_positive():
    class Empty(GameEnv):
        def setup(self):
            return "  "

    with pytest.raises(ContractError, match="non-empty str"):
        Empty().reset(seed=0)
    with pytest.raises(ValueError, match="max_turns"):
        Guess(max_turns=0)


# -------------------------------------------------------------------------------------------- tools


class Shop(ToolEnv):
    KIND = "tool"
    SKILL = "orders database"
    NAME = "shop"
    TOOLS = [
        {
            "type": "function",
            "function": {
                "name": "stock",
                "description": "Units in stock.",
                "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            },
        }
    ]

    def setup(self):
        self.units = {"pen": 3, "ink": self.rng.randint(1, 9)}
        self.bought = []
        return "Buy all the ink and answer with the count."

    def stock(self, item):
        return {"item": item, "units": self.units[item]}

    @tool("Buy units of an item.", item="item name", qty="how many")
    def buy(self, item: str, qty: int, rush: bool = False) -> str:
        if qty > self.units.get(item, 0):
            raise ToolError("not enough stock")
        self.units[item] -= qty
        self.bought.append((item, qty))
        return "ok"

    def check_answer(self, answer):
        return self.units["ink"] == 0 and answer == str(sum(q for i, q in self.bought if i == "ink"))


def test_tool_schemas_from_decorator_and_tools_list():
    schemas = {s["function"]["name"]: s for s in Shop().tool_schemas()}
    assert schemas["buy"] == {
        "type": "function",
        "function": {
            "name": "buy",
            "description": "Buy units of an item.",
            "parameters": {
                "type": "object",
                "properties": {
                    "item": {"type": "string", "description": "item name"},
                    "qty": {"type": "integer", "description": "how many"},
                    "rush": {"type": "boolean"},
                },
                "required": ["item", "qty"],
            },
        },
    }
    assert schemas["stock"]["function"]["parameters"]["required"] == ["item"]


def test_tool_dispatch_errors_and_answer():
    env = Shop()
    obs, info = env.reset(seed=2)
    assert "Tools:" in obs and "<tool_call>" in obs and "<answer>" in obs
    assert {t["function"]["name"] for t in info["tools"]} == {"buy", "stock"}
    ink = env.units["ink"]
    step = lambda a: env.step(a)[0]  # noqa: E731
    assert step(Shop.call("stock", item="ink")) == f'Result of stock: {{"item": "ink", "units": {ink}}}'
    assert step(Shop.call("stock", item="gold")) == "Error in stock: not found: 'gold'"
    assert step(Shop.call("teleport")).startswith("Error: unknown tool 'teleport'")
    assert step(Shop.call("buy", item="ink")) == "Error in buy: missing argument(s) qty."
    assert step(Shop.call("buy", item="ink", qty=1, color="red")) == "Error in buy: unknown argument(s) color."
    assert step(Shop.call("buy", item="ink", qty="many")) == "Error in buy: argument 'qty' must be integer."
    assert step(Shop.call("buy", item="ink", qty=99)) == "Error in buy: not enough stock"
    assert step("<tool_call>{oops}</tool_call>").startswith("Error: tool call is not valid JSON")
    assert "Invalid format" in step("I'm done")
    assert step(Shop.call("buy", item="ink", qty=str(ink))) == "Result of buy: ok"  # "3" coerced to 3
    obs, reward, term, trunc, info = env.step(Shop.answer(ink))
    assert (reward, term, info["won"]) == (1.0, True, True) and info["turn"] == 11


def test_random_action_accepts_an_int_seed():
    class Coin(GameEnv):
        def setup(self):
            return "Call heads or tails, e.g. \\boxed{heads}."

        def random_action(self, rng):
            return self.boxed(rng.choice(["heads", "tails"]) + str(rng.randint(0, 10**9)))

    env = Coin()
    env.reset(seed=0)
    assert env.random_action(5) == env.random_action(random.Random(5)) != env.random_action(6)
    assert Shop().random_action(3) == Shop().random_action(random.Random(3))  # the ToolEnv default too


def test_tool_answer_wrong_loses():
    env = Shop()
    env.reset(seed=2)
    assert env.step("<answer>0</answer>")[1:3] == (0.0, True)


# ---------------------------------------------------------------------------------------- reasoning


class Square(ReasoningEnv):
    KIND = "reasoning"
    SKILL = "mathematical reasoning"
    NAME = "square"
    MAX_ATTEMPTS = 2

    def setup(self):
        self.n = self.rng.randint(11, 99)
        return f"What is {self.n} squared?"

    def check_answer(self, answer):
        return self.same_number(answer, self.n**2)


def test_reasoning_attempts_and_number_matching():
    env = Square()
    obs, _ = env.reset(seed=4)
    assert "\\boxed{answer}" in obs and "2 attempts" in obs
    assert "Invalid format" in env.step("it is big")[0]
    obs, reward, term, _, _ = env.step("\\boxed{1}")
    assert (reward, term) == (0.0, False) and "1 attempt(s) left" in obs
    obs, reward, term, _, info = env.step(f"\\boxed{{{env.n**2:,}}}")  # thousands separator accepted
    assert (reward, term, info["won"]) == (1.0, True, True)
    env.reset(seed=4)
    env.step("\\boxed{2}")
    assert env.step("\\boxed{3}")[1:3] == (0.0, True)
    assert ReasoningEnv.same_number("3/4", 0.75) and not ReasoningEnv.same_number("x", 1)


# ----------------------------------------------------------------------------------------- contract


def test_contract_text_lists_rules_and_imports():
    assert KINDS == ("game", "tool", "reasoning") and len(SKILLS) == 9
    for module in ALLOWED_IMPORTS:
        if module != "__future__":
            assert module in CONTRACT_TEXT
    for word in ("\\boxed{", "<tool_call>", "<answer>", "reference_action", "random_action", "hint", "self.rng"):
        assert word in CONTRACT_TEXT
    assert all(skill in CONTRACT_TEXT for skill in SKILLS)


def _load(code: str) -> type:
    ns: dict = {}
    exec(compile(code, "<contract example>", "exec"), ns)
    return next(v for v in ns.values() if isinstance(v, type) and issubclass(v, TextEnv) and v.KIND and v.NAME)


@pytest.mark.parametrize("kind", ["game", "tool", "reasoning"])
def test_contract_examples_are_working_envs(kind):
    cls = _load(contract_examples()[kind])
    assert cls.KIND == kind
    wins = random_wins = 0
    for seed in range(60):
        env = cls()
        env.reset(seed=seed)
        while not env.done:
            info = env.step(env.reference_action())[4]
        wins += info["won"]
        rng = random.Random(10_000 + seed)
        env.reset(seed=seed)
        while not env.done:
            info = env.step(env.random_action(rng))[4]
        random_wins += info["won"]
    assert wins == 60 and random_wins <= 9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(TextGymEnv(cls()), skip_render_check=True)


# -------------------------------------------------------------------------------------- gym wrapper


def test_gym_wrapper_sanitises_clips_and_seeds():
    class Wide(GameEnv):
        def setup(self):
            return "héllo ✓ " + "x" * 100 + str(self.rng.random())

        def play(self, command):
            return self.win("bye")

    env = TextGymEnv(Wide(), max_obs_chars=50, render_mode="ansi")
    obs, info = env.reset(seed=1)
    assert obs.startswith("h?llo ✓ x") and len(obs) == 50 and obs.endswith("...")
    assert obs in env.observation_space and env.render() == obs
    again, info2 = env.reset(seed=1)
    assert again == obs and info2["episode_seed"] == info["episode_seed"]
    assert env.reset()[1]["episode_seed"] != info["episode_seed"]
    assert env.step("\\boxed{go}")[:4] == ("bye", 1.0, True, False)
    with pytest.raises(ValueError, match="render_mode"):
        TextGymEnv(Wide(), render_mode="human")
