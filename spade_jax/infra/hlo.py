"""Reading an optimised HLO module's text (`jax.jit(f).lower(...).compile().as_text()`): which arrays it makes.

What tests and benchmarks ask of a compiled program, without running it: the float32 values of at least a given
size that any instruction produces (fused or not: a fused float32 intermediate still costs its conversions), and
the arrays a `while` loop carries from one iteration to the next (its state: what each decode step reads
again). Shapes are (dtype, dims) pairs as HLO prints them ("f32", (4, 2, 16, 512)).

Text in, values out: an HLO text this does not recognise gives empty results, never an error.
"""

from __future__ import annotations

import math
import re

Shape = tuple[str, tuple[int, ...]]

_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*")
_OP = re.compile(r"\s*(?P<op>[\w\-]+)\(")
_ARRAY = re.compile(r"(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
_NOT_MADE = ("parameter", "get-tuple-element", "bitcast", "tuple", "constant")


def _shapes(text: str) -> list[Shape]:
    return [(m["dtype"], tuple(int(d) for d in m["dims"].split(",") if d)) for m in _ARRAY.finditer(text)]


def elements(shape: Shape) -> int:
    return math.prod(shape[1])


def _closing(text: str) -> int:
    """Index of the parenthesis closing the one text starts with (the last index when unbalanced)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i
    return len(text) - 1


def instructions(hlo: str) -> list[tuple[str, str, list[Shape]]]:
    """(name, opcode, result shapes) of every instruction, in every computation (fusions included)."""
    out = []
    for line in hlo.splitlines():
        m = _HEAD.match(line)
        if not m:
            continue
        rest = line[m.end() :]
        if rest.startswith("("):  # a tuple type, possibly with /*index=N*/ comments: up to its closing paren
            end = _closing(rest)
            type_text, rest = rest[: end + 1], rest[end + 1 :]
        else:
            type_text, _, rest = rest.partition(" ")
            rest = " " + rest
        op = _OP.match(rest)
        if op:
            out.append((m["name"], op["op"], _shapes(type_text)))
    return out


def made_arrays(hlo: str, dtype: str = "f32", min_elements: int = 1) -> list[tuple[str, str, Shape]]:
    """(name, opcode, shape) of every array of `dtype` and at least `min_elements` elements that an instruction
    computes (parameters, tuple plumbing, bitcasts and constants excluded)."""
    return [(name, op, s) for name, op, shapes in instructions(hlo) if op not in _NOT_MADE for s in shapes
            if s[0] == dtype and elements(s) >= min_elements]  # fmt: skip


def while_states(hlo: str) -> list[list[Shape]]:
    """The state of every `while` loop: the arrays it carries between iterations, one list per loop."""
    return [shapes for _, op, shapes in instructions(hlo) if op == "while"]
