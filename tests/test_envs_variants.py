"""Programmatic seed variants: every seed has a table, a variant only rewrites its constants and NAME, draws are
deterministic and distinct, the directions keep their side of the seed, the extremes of every table pass every
gate in the sandbox, and "harder" is measurably harder (random play wins less, the reference needs more steps,
or the puzzle is bigger). The designer warm start turns them into designer examples."""

from __future__ import annotations

import ast
import random
import sys
import types

import pytest

from spade_jax.config.warmstart import WarmStartConfig
from spade_jax.envs.base import TextEnv
from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.envs.variants import PARAMS, difficulty, extremes, make_variants, seed_params, variant_source
from spade_jax.gates.novelty import NoveltyIndex
from spade_jax.gates.sandboxed import validate
from spade_jax.run.warmstart import designer_examples

NAMES = [s.name for s in list_seeds()]
POOL_WORKERS = 2  # for the `pool` fixture in conftest.py


def load(source: str, tag: str) -> type:
    """The class of a variant of our own seeds, run in-process (trusted code, never a design)."""
    module = types.ModuleType(f"spade_jax_variant_{tag}")
    sys.modules[module.__name__] = module
    exec(compile(source, f"<{tag}>", "exec"), module.__dict__)
    (cls,) = [
        v
        for v in module.__dict__.values()
        if isinstance(v, type) and issubclass(v, TextEnv) and v.__module__ == module.__name__
    ]
    return cls


def play(cls: type, policy: str, episodes: int) -> tuple[float, float, list]:
    """(win rate, mean steps, envs after reset) of `policy` ('random' or 'reference') at max_turns 25."""
    wins = steps = 0
    envs = []
    for seed in range(episodes):
        env = cls(max_turns=25)
        env.reset(seed=seed)
        envs.append(cls(max_turns=25))
        envs[-1].reset(seed=seed)
        rng = random.Random(seed)
        for t in range(26):
            action = env.reference_action() if policy == "reference" else env.random_action(rng)
            *_, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                wins += info.get("won") is True
                steps += t + 1
                break
    return wins / episodes, steps / episodes, envs


def test_every_seed_has_a_table_holding_its_own_values():
    assert set(PARAMS) == set(NAMES)
    for name in NAMES:
        base = seed_params(load_seed_source(name), name)
        assert base.keys() == PARAMS[name].keys()
        assert len(make_variants(name, 1000)) >= 2, name


@pytest.mark.parametrize("name", NAMES)
def test_a_variant_changes_only_its_constants_and_name(name):
    source = load_seed_source(name)
    (v,) = make_variants(name, 1, rng_seed=3)
    changed = [
        (a, b) for a, b in zip(source.splitlines(), v.source.splitlines(), strict=True) if a != b
    ]  # same line count
    base = seed_params(source, name)
    knobs = {k for k in v.params if v.params[k] != base[k]}
    assert knobs and len(changed) == len(knobs) + 1  # one line per changed constant, and NAME
    tree = ast.parse(v.source)
    consts = {
        s.targets[0].id: s.value.value
        for body in [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
        for s in body
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Constant)
    }
    assert consts["NAME"] == v.name and v.name.startswith(name + "_")
    assert all(consts[k] == val for k, val in v.params.items())
    assert variant_source(source, base, name) == source  # the seed's own values give the seed back


def test_draws_are_deterministic_and_distinct():
    a = make_variants("grid_maze", 8, rng_seed=1)
    assert [v.source for v in a] == [v.source for v in make_variants("grid_maze", 8, rng_seed=1)]
    assert [v.name for v in a] != [v.name for v in make_variants("grid_maze", 8, rng_seed=2)]
    assert len({v.name for v in a}) == 8 and len({v.source for v in a}) == 8
    assert len(make_variants("secret_word", 100)) == len(PARAMS["secret_word"]["MAX_MISSES"]) - 1  # all there are
    with pytest.raises(ValueError, match="direction"):
        make_variants("grid_maze", 1, direction="sideways")


@pytest.mark.parametrize("name", ["grid_maze", "meeting_scheduler", "sequence_next", "code_breaker"])
def test_directions_stay_on_their_side_of_the_seed(name):
    base = seed_params(load_seed_source(name), name)
    table = PARAMS[name]
    for direction, sign in (("easier", -1), ("harder", 1)):
        found = make_variants(name, 50, direction=direction)
        assert found, (name, direction)
        for v in found:
            moves = [table[k].index(v.params[k]) - table[k].index(base[k]) for k in table]
            assert all(m * sign >= 0 for m in moves) and any(moves), (direction, v.params)
            assert (v.difficulty - difficulty(name, base)) * sign > 0


@pytest.mark.parametrize("name", NAMES)
def test_the_extremes_pass_every_gate(pool, name):
    """The easiest (random play's best chance) and the hardest (slowest) variant of each seed; a one-off
    run of the gates on every variant passed 388 of 388 (largest random-play win rate 0.14, balance_scale)."""
    for v in extremes(name):
        verdict = validate(v.source, pool)
        assert verdict.valid, f"{v.name}: {verdict}"
        assert verdict.details["reference_win_rate"] > 0, v.name


# How "harder" shows, per seed: random play wins less; the reference policy needs more steps; or a bigger
# puzzle (a number read from the environment after reset).
RANDOM_WINS_LESS = ["balance_scale", "code_breaker", "knapsack_pick", "knights_knaves", "light_switches",
                    "linear_system", "memory_pairs", "number_target", "sequence_next", "sonar_hunt",
                    "date_offset", "nim_duel", "secret_word"]  # fmt: skip
MORE_REFERENCE_STEPS = ["grid_maze", "inventory_restock", "simon_recall", "knapsack_pick", "memory_pairs"]
BIGGER = {
    "file_organizer": lambda e: len(e.files),
    "flight_booking": lambda e: sum((x["origin"], x["destination"]) == (e.origin, e.dest) for x in e.flights.values()),
    "ledger_settle": lambda e: len(e.tx[e.overdrawn]),
    "meeting_scheduler": lambda e: len(e.guests) + sum(len(b) for b in e.busy.values()),
    "order_cancel": lambda e: len(e.orders),
}


def test_every_seed_has_a_difficulty_claim():
    assert set(RANDOM_WINS_LESS) | set(MORE_REFERENCE_STEPS) | set(BIGGER) == set(NAMES)


@pytest.mark.parametrize("name", sorted(set(RANDOM_WINS_LESS) | set(MORE_REFERENCE_STEPS) | set(BIGGER)))
def test_harder_is_harder(name):
    easy, hard = (load(v.source, f"{name}_{i}") for i, v in enumerate(extremes(name)))
    if name in RANDOM_WINS_LESS:
        assert play(easy, "random", 1000)[0] > play(hard, "random", 1000)[0]
    if name in MORE_REFERENCE_STEPS:
        assert play(hard, "reference", 20)[1] > play(easy, "reference", 20)[1]
    if name in BIGGER:
        size = BIGGER[name]
        easy_envs, hard_envs = play(easy, "reference", 20)[2], play(hard, "reference", 20)[2]
        assert sum(map(size, hard_envs)) > sum(map(size, easy_envs))


def test_novelty_gate_sees_a_variant_as_a_duplicate_of_its_seed():
    """Literals are canonicalised: a variant differs from its seed only in them, so an archive holding the
    seed rejects it. Variants are warm-start material, not designs to archive beside their seed."""
    index = NoveltyIndex()
    index.add("seed", load_seed_source("sonar_hunt"))
    a, b = make_variants("sonar_hunt", 2)
    result = index.check(a.source)
    assert not result.novel and "identical after renaming names and literals" in result.reason
    index = NoveltyIndex()
    index.add("sibling", a.source)
    assert not index.check(b.source).novel


class _Tok:
    eos_ids = (0,)

    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 500 + 1 for c in text]


class _Designer:
    def parts_for(self, target):
        return target

    def fit(self, parts):
        return [], [7, 7, 7], parts


def test_warm_start_designer_examples_include_variants():
    seeds = [s for s in list_seeds() if s.name in ("sonar_hunt", "nim_duel")]
    tok = _Tok()
    plain = designer_examples(_Designer(), tok, seeds, 1)
    assert len(plain) == 2
    more = designer_examples(_Designer(), tok, seeds, 1, variants=3, variant_seed=0)
    assert len(more) == 2 + 2 * 3 and all(s.role == 1 and list(s.prompt_ids) == [7, 7, 7] for s in more)
    answers = {tuple(s.completion_ids) for s in more}
    assert len(answers) == 8  # the seeds and six distinct variants
    harder = designer_examples(_Designer(), tok, seeds, 0, variants=2, direction="harder")
    assert len(harder) == 4
    with pytest.raises(ValueError, match="designer_variant_direction"):
        WarmStartConfig(designer_variant_direction="up")
