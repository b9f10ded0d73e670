"""Extraction of environment source from designer completions (fences, several blocks, truncation)."""

from __future__ import annotations

import ast

import pytest

from spade_jax.envs.contract import contract_examples
from spade_jax.envs.extract import ExtractError, extract_source, find_blocks, try_extract

GAME = contract_examples()["game"]
TOOL = contract_examples()["tool"]

HELPER = """\
def neighbours(cell):
    r, c = cell
    return [(r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)]
"""

USES_HELPER = """\
from spade_jax.envs.base import GameEnv


class Walk(GameEnv):
    NAME = "walk"

    def setup(self) -> str:
        self.pos = (0, 0)
        return "Walk. Reply \\\\boxed{n}."

    def play(self, command: str):
        self.pos = neighbours(self.pos)[0]
        return self.lose("done")
"""


def fenced(code: str, tag: str = "python", fence: str = "```") -> str:
    return f"{fence}{tag}\n{code.rstrip()}\n{fence}\n"


def test_single_block_with_prose_around_it():
    text = "Here is my environment.\n\n" + fenced(GAME) + "\nIt tests logical deduction.\n"
    assert extract_source(text).strip() == GAME.strip()


@pytest.mark.parametrize("tag", ["python", "py", "Python3", ""])
def test_python_tags_and_untagged_fences(tag):
    assert extract_source(fenced(GAME, tag)).strip() == GAME.strip()


def test_tilde_fence_and_crlf_line_endings():
    text = fenced(GAME, "python", "~~~").replace("\n", "\r\n")
    assert extract_source(text).strip() == GAME.strip()


def test_non_python_blocks_are_ignored():
    text = fenced('{"kind": "game"}', "json") + fenced("pip install x", "bash") + fenced(TOOL)
    assert extract_source(text).strip() == TOOL.strip()


def test_last_environment_block_wins_when_the_model_rewrites_it():
    text = "First try:\n" + fenced(TOOL) + "\nWait, a better one:\n" + fenced(GAME)
    assert extract_source(text).strip() == GAME.strip()


def test_helper_block_is_joined_and_usage_block_is_not():
    usage = "env = Walk()\nobs, info = env.reset(seed=1)\nprint(obs)\nprint(env.step('x'))\n"
    text = "Helpers:\n" + fenced(HELPER) + "\nThe env:\n" + fenced(USES_HELPER) + "\nUsage:\n" + fenced(usage)
    source = extract_source(text)
    tree = ast.parse(source)
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    assert names == ["neighbours", "Walk"]
    assert "env.reset" not in source


def test_unrelated_helper_block_is_not_joined():
    text = fenced("def unused():\n    return 1\n") + fenced(GAME)
    assert extract_source(text).strip() == GAME.strip()


def test_unclosed_fence_is_reported_as_truncation():
    text = "Sure!\n```python\n" + GAME[: len(GAME) // 2]
    with pytest.raises(ExtractError, match="never closed.*truncated"):
        extract_source(text)


def test_unclosed_trailing_example_does_not_hide_a_complete_block():
    text = fenced(GAME) + "\nExample run:\n```python\nenv = HigherLower()\nenv.re"
    assert extract_source(text).strip() == GAME.strip()


def test_think_sections_are_dropped():
    draft = fenced(TOOL)
    text = f"<think>Let me draft one.\n{draft}\nNo, a game is better.</think>\n" + fenced(GAME)
    assert extract_source(text).strip() == GAME.strip()
    # Chat templates can open <think> in the prompt: only the closing tag is in the completion.
    assert extract_source("reasoning...</think>\n" + fenced(GAME)).strip() == GAME.strip()


def test_truncated_inside_think():
    with pytest.raises(ExtractError, match="think"):
        extract_source("<think>I will write a maze game with " + "many ideas " * 50)


def test_bare_code_passes_through_unchanged():
    assert extract_source(GAME) == GAME


def test_unfenced_code_with_prose_before_and_after():
    text = "Here is the environment:\n\n" + GAME + "\nThis environment tests deduction.\nEnjoy!\n"
    source = extract_source(text)
    assert source.strip() == GAME.strip()
    compile(source, "<env>", "exec")


def test_bare_code_with_a_syntax_error_is_handed_to_the_static_gate():
    broken = GAME.replace("def play(self, command: str):", "def play(self, command: str)")
    assert extract_source(broken).strip() == broken.strip()
    # Fenced too: the block that looks like the environment is returned, unparsed.
    assert extract_source(fenced(broken)).strip() == broken.strip()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("   \n  ", "empty"),
        ("I think the best environment is a maze where the agent must find the exit.", "no Python code"),
        (fenced('{"a": 1}', "json"), "no Python code block"),
        (fenced("x = 1\nprint(x)\n"), "defines an environment class"),
    ],
)
def test_failures_have_one_line_reasons(text, reason):
    source, why = try_extract(text)
    assert source is None
    assert reason in why and "\n" not in why


def test_find_blocks_reports_lines_and_closure():
    text = "a\n```python\nx = 1\n```\nb\n```json\n{}\n```\n```py\ny = 2"
    blocks = find_blocks(text)
    assert [(b.lang, b.line, b.closed, b.is_python) for b in blocks] == [
        ("python", 2, True, True),
        ("json", 6, True, False),
        ("py", 9, False, True),
    ]
    assert blocks[0].code == "x = 1\n"
