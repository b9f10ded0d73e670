"""Programmatic variants of the seed environments: the same program with other difficulty parameters.

Every seed declares its difficulty knobs as integer constants (class attributes such as `SIZE = 7`, or a
few module-level ones); `PARAMS` lists, per seed, the values each knob may take, ordered from the
easiest to the hardest, with the seed's own value among them. A variant rewrites those constants and the
`NAME` in the source (located with `ast`; the rest of the file, comments and layout included, is left as
written), so it is a program of exactly the seed library's kind, at another difficulty. Every value in the
tables keeps the environment valid under the gates (random play wins at most 15%, the reference still
wins): a one-off gate run passed all 388 variants; tests/test_envs_variants.py checks each
table's easiest and hardest variant in the sandbox.

`direction="easier"` moves every knob to the seed's value or easier (at least one strictly), `"harder"`
the other way, `"any"` anywhere. Variants are drawn deterministically from `seed`, without repeats.

Novelty: the novelty gate canonicalises literals, so a variant is a *duplicate* of its seed and of its
sibling variants (identical structure digest). Variants are warm-start material for the designer, not
environments to archive next to their seed.
"""

from __future__ import annotations

import ast
import itertools
import random
from dataclasses import dataclass, field

__all__ = ["DIRECTIONS", "PARAMS", "Variant", "difficulty", "make_variants", "seed_params", "spread", "variant_source"]

DIRECTIONS = ("any", "easier", "harder")

# seed -> knob -> values, easiest first. The seed's current value must be one of them.
PARAMS: dict[str, dict[str, tuple[int, ...]]] = {
    "balance_scale": {"COINS": (6, 8, 10, 12), "WEIGHINGS": (5, 4, 3)},
    "code_breaker": {"LENGTH": (3, 4), "DIGITS": (6, 7, 8), "GUESSES": (12, 10, 8)},
    "date_offset": {"MIN_OFFSET": (5, 20, 40), "MAX_OFFSET": (60, 150, 300), "MAX_ATTEMPTS": (3, 2, 1)},
    "file_organizer": {"FILES": (4, 6, 9, 12, 15)},
    "flight_booking": {"FLIGHTS": (12, 20, 30, 45), "ON_ROUTE": (4, 6, 9, 12)},
    "grid_maze": {"SIZE": (6, 7, 8), "MIN_DISTANCE": (6, 7, 8, 9), "SPARE_MOVES": (3, 2, 1)},
    "inventory_restock": {"ITEMS": (4, 5, 7, 9), "LOW_ITEMS": (1, 2, 3, 4)},
    "knapsack_pick": {"ITEMS": (5, 6, 7, 8), "MAX_WEIGHT": (6, 9, 12)},
    "knights_knaves": {"PEOPLE": (4, 5, 6)},
    "ledger_settle": {"MIN_ROWS": (1, 3, 5), "MAX_ROWS": (5, 6, 9, 12)},
    "light_switches": {"N": (7, 8), "PRESSES": (16, 14, 12)},
    "linear_system": {"MAX_SOLUTION": (5, 9, 15, 25), "MAX_COEF": (3, 6, 9), "MAX_ATTEMPTS": (3, 2, 1)},
    "meeting_scheduler": {"GUESTS": (1, 2, 3, 4), "MAX_BUSY": (3, 4, 5), "EARLIEST": (9, 10, 11, 12)},
    "memory_pairs": {"PAIRS": (4, 5, 6, 7, 8), "TURNS": (16, 14, 12)},
    "nim_duel": {"MAX_HEAP": (5, 7, 9, 12), "MIN_HEAPS": (2, 3), "MAX_HEAPS": (4, 5)},
    "number_target": {"OPERATIONS": (3, 4), "MIN_MOVES": (4, 5), "SPARE_MOVES": (1, 0)},
    "order_cancel": {"ORDERS": (6, 9, 12, 18, 24), "CUSTOMER_ORDERS": (2, 3, 5, 7)},
    "secret_word": {"MAX_MISSES": (7, 6, 5, 4, 3)},
    "sequence_next": {"SHOWN": (7, 6, 5, 4), "TO_WIN": (1, 2, 3, 4), "MISSES": (4, 3, 2)},
    "simon_recall": {"GOAL": (5, 6, 7, 9, 11), "START": (2, 3, 4), "LIVES": (3, 2, 1)},
    "sonar_hunt": {"GRID": (7, 8, 9), "PINGS": (4, 3)},
}
# Pairs that must hold for a combination to be a valid environment (min <= max, parts <= whole).
_CONSTRAINTS: dict[str, tuple[tuple[str, str], ...]] = {
    "date_offset": (("MIN_OFFSET", "MAX_OFFSET"),),
    "inventory_restock": (("LOW_ITEMS", "ITEMS"),),
    "ledger_settle": (("MIN_ROWS", "MAX_ROWS"),),
    "nim_duel": (("MIN_HEAPS", "MAX_HEAPS"),),
    "order_cancel": (("CUSTOMER_ORDERS", "ORDERS"),),
    "flight_booking": (("ON_ROUTE", "FLIGHTS"),),
    "simon_recall": (("START", "GOAL"),),
}


@dataclass(frozen=True)
class Variant:
    """One variant: the seed it comes from, its NAME, knob values, difficulty in [0, 1] and source."""

    seed: str
    name: str
    params: dict[str, int] = field(hash=False)
    difficulty: float
    source: str = field(repr=False)


def _constants(tree: ast.Module) -> dict[str, ast.Constant]:
    """`NAME = <constant>` assignments at module level and in class bodies, by name (the last one wins)."""
    out: dict[str, ast.Constant] = {}
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for stmt in body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Constant)
            ):
                out[stmt.targets[0].id] = stmt.value
    return out


def seed_params(source: str, seed: str) -> dict[str, int]:
    """The seed's own values of its knobs, read from its source."""
    consts = _constants(ast.parse(source))
    out = {}
    for knob, values in PARAMS[seed].items():
        if knob not in consts or not isinstance(consts[knob].value, int):
            raise ValueError(f"seed {seed}: no integer constant {knob} in its source")
        value = consts[knob].value
        if value not in values:
            raise ValueError(f"seed {seed}: {knob}={value} is not among its variant values {values}")
        out[knob] = value
    return out


def variant_source(source: str, params: dict[str, int], name: str | None = None) -> str:
    """`source` with the integer constants in `params` (and NAME, when given) replaced, nothing else touched."""
    tree = ast.parse(source)
    consts = _constants(tree)
    edits: list[tuple[ast.Constant, str]] = []
    for knob, value in params.items():
        if knob not in consts:
            raise ValueError(f"no constant {knob} in the source")
        edits.append((consts[knob], repr(int(value))))
    if name is not None:
        if "NAME" not in consts:
            raise ValueError("no NAME constant in the source")
        edits.append((consts["NAME"], repr(str(name)).replace("'", '"')))
    lines = source.splitlines(keepends=True)
    # Right to left, bottom to top, so earlier offsets stay valid (constants are single-line literals).
    for node, text in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        if node.end_lineno != node.lineno:
            raise ValueError(f"constant on line {node.lineno} spans several lines")
        raw = lines[node.lineno - 1].encode()
        raw = raw[: node.col_offset] + text.encode() + raw[node.end_col_offset :]
        lines[node.lineno - 1] = raw.decode()
    return "".join(lines)


def difficulty(seed: str, params: dict[str, int]) -> float:
    """Mean position of the knobs in their easiest-to-hardest order: 0 all easiest, 1 all hardest."""
    table = PARAMS[seed]
    return sum(table[k].index(v) / max(len(table[k]) - 1, 1) for k, v in params.items()) / max(len(params), 1)


def _combos(seed: str, base: dict[str, int], direction: str) -> list[dict[str, int]]:
    table = PARAMS[seed]
    options = []
    for knob, values in table.items():
        i = values.index(base[knob])
        if direction == "easier":
            options.append(values[: i + 1])
        elif direction == "harder":
            options.append(values[i:])
        else:
            options.append(values)
    out = []
    for combo in itertools.product(*options):
        params = dict(zip(table, combo))
        if params == base:
            continue
        if any(params[a] > params[b] for a, b in _CONSTRAINTS.get(seed, ())):
            continue
        out.append(params)
    return out


def _name(seed: str, params: dict[str, int], base: dict[str, int]) -> str:
    changed = [f"{k.lower()}{v}" for k, v in params.items() if v != base[k]]
    return "_".join([seed, *changed])


def make_variants(
    seed: str, n: int, *, rng_seed: int = 0, direction: str = "any", source: str | None = None
) -> list[Variant]:
    """Up to `n` distinct variants of `seed` (fewer when the tables hold fewer), drawn from `rng_seed`."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r}; expected one of {DIRECTIONS}")
    if seed not in PARAMS:
        raise ValueError(f"no variant table for seed {seed!r}; known: {', '.join(sorted(PARAMS))}")
    if source is None:
        from spade_jax.envs.seeds import load_seed_source

        source = load_seed_source(seed)
    base = seed_params(source, seed)
    combos = _combos(seed, base, direction)
    random.Random(f"{seed}/{direction}/{rng_seed}").shuffle(combos)
    return [
        Variant(seed, _name(seed, p, base), p, difficulty(seed, p), variant_source(source, p, _name(seed, p, base)))
        for p in combos[: max(n, 0)]
    ]


def spread(seed: str, n: int, source: str | None = None) -> list[Variant]:
    """Up to `n` distinct variants of `seed` evenly spaced over its whole table, easiest first and the hardest
    last (ties in difficulty broken by name, so the same seed always gives the same list)."""
    every = sorted(make_variants(seed, 10**6, direction="any", source=source), key=lambda v: (v.difficulty, v.name))
    if n <= 0 or not every:
        return []
    picks = [every[round(i * (len(every) - 1) / max(n - 1, 1))] for i in range(n)]
    return list(dict.fromkeys(picks))


def extremes(seed: str, source: str | None = None) -> tuple[Variant, Variant]:
    """The easiest and the hardest variant of `seed` (every knob at its end of the table, constraints kept)."""
    if source is None:
        from spade_jax.envs.seeds import load_seed_source

        source = load_seed_source(seed)
    base = seed_params(source, seed)
    combos = [p for p in _combos(seed, base, "any")] + [base]
    lo = min(combos, key=lambda p: (difficulty(seed, p), sorted(p.items())))
    hi = max(combos, key=lambda p: (difficulty(seed, p), sorted(p.items())))
    return tuple(  # type: ignore[return-value]
        Variant(seed, _name(seed, p, base), p, difficulty(seed, p), variant_source(source, p, _name(seed, p, base)))
        for p in (lo, hi)
    )
