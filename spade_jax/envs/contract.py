"""The environment contract as data: prompt-ready text for the designer, skills, kinds, allowed imports.

The text lives in contract.md next to this file; its three example environments are real code that the
tests run against the gates and the base classes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from spade_jax.envs.base import KINDS

__all__ = [
    "ALLOWED_IMPORTS", "CONTRACTS", "CONTRACT_TEXT", "CONTRACT_TEXT_GYM", "CONTRACT_TEXT_INTERACTIVE",
    "CONTRACT_TEXT_SHORT", "KINDS", "SKILLS",
    "TOOL_DOMAINS", "class_attrs", "contract_examples", "contract_text", "str_attrs",
]  # fmt: skip

CONTRACT_PATH = Path(__file__).with_name("contract.md")
CONTRACT_TEXT: str = CONTRACT_PATH.read_text(encoding="utf-8")
# The essentials in < 700 SmolLM2 tokens (the full text is ~2K): for small models with a 4K context.
CONTRACT_SHORT_PATH = Path(__file__).with_name("contract_short.md")
CONTRACT_TEXT_SHORT: str = CONTRACT_SHORT_PATH.read_text(encoding="utf-8")
# The paper's Gym-style format (spade_jax.envs.formats), in about as many tokens as the short text.
CONTRACT_TEXT_GYM: str = Path(__file__).with_name("contract_gym.md").read_text(encoding="utf-8")
# The reference's interactive-game requirements (its INTERACTIVE_SPEC, prompts/corpus_template.py), in our words:
# a Gym-style class, a boxed command each turn, hidden state, partial reward, termination only at the goal.
CONTRACT_TEXT_INTERACTIVE: str = Path(__file__).with_name("contract_interactive.md").read_text(encoding="utf-8")
CONTRACTS: dict[str, str] = {"full": CONTRACT_TEXT, "short": CONTRACT_TEXT_SHORT, "gym": CONTRACT_TEXT_GYM,
                             "interactive": CONTRACT_TEXT_INTERACTIVE}  # fmt: skip

# The nine cognitive skills of the SPADE games setting.
SKILLS: tuple[str, ...] = (
    "pattern recognition",
    "logical deduction",
    "mathematical reasoning",
    "spatial reasoning",
    "strategic planning",
    "causal inference",
    "memory recall",
    "optimization",
    "language understanding",
)

# Example tool-use domains (the SKILL of a tool environment; not an exhaustive list).
TOOL_DOMAINS: tuple[str, ...] = (
    "file system",
    "orders database",
    "calendar",
    "bank ledger",
    "travel booking",
    "inventory",
    "email",
)

# Top-level modules generated code may import (plus ALLOWED_OWN_MODULES).
ALLOWED_IMPORTS: tuple[str, ...] = (
    "random",
    "math",
    "re",
    "itertools",
    "collections",
    "json",
    "string",
    "dataclasses",
    "heapq",
    "functools",
    "fractions",
    "typing",
    "statistics",
    "enum",
    "copy",
    "__future__",
)
ALLOWED_OWN_MODULES: tuple[str, ...] = ("spade_jax.envs.base",)


def contract_text(name: str = "full") -> str:
    """The contract text called `name` ("full", "short", "gym" or "interactive"); ValueError naming the known
    ones otherwise."""
    if name not in CONTRACTS:
        raise ValueError(f"unknown contract {name!r}; expected one of {tuple(CONTRACTS)}")
    return CONTRACTS[name]


def contract_examples() -> dict[str, str]:
    """The example environments in the contract text, by kind ("game", "tool", "reasoning")."""
    out: dict[str, str] = {}
    for kind, code in re.findall(r"## Example: (\w+)\n\n```python\n(.*?)```", CONTRACT_TEXT, re.S):
        out[kind] = code
    return out


def class_attrs(source: str, where: str, required: tuple[str, ...] = ("KIND",)) -> dict[str, str]:
    """The string class attributes (KIND, SKILL, NAME, ...) of the first top-level class that defines all of
    `required`, read without running the code; ValueError naming `where` when the source does not parse or has
    no such class."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as e:
        raise ValueError(f"{where}: not valid Python ({e.msg}, line {e.lineno})") from None
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            attrs = str_attrs(node)
            if set(required) <= attrs.keys():
                return attrs
    raise ValueError(f"{where}: no environment class with {' and '.join(required)} string attributes")


def str_attrs(node: ast.ClassDef) -> dict[str, str]:
    """The `NAME = "text"` assignments in a class body, by name."""
    return {
        s.targets[0].id: s.value.value
        for s in node.body
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
    }  # fmt: skip
