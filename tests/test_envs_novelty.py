"""Novelty check: renamed/reordered copies of real environments are duplicates; distinct ones are novel."""

from __future__ import annotations

import ast
import random

import pytest

from spade_jax.envs.contract import contract_examples
from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.gates.novelty import NoveltyConfig, NoveltyIndex, fingerprint, is_novel

SEEDS = {s.name: load_seed_source(s.name) for s in list_seeds()}
KEEP = {"self", "setup", "play", "check_answer", "hint", "reference_action", "random_action", "reset", "step"}


class _Disguise(ast.NodeTransformer):
    """What a designer might do to a copied environment: rename everything, change constants and text,
    shuffle the methods, drop docstrings."""

    def __init__(self, tree: ast.AST, rng: random.Random):
        names = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef | ast.ClassDef) and not n.name.startswith("__"):
                names.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                names.add(n.attr)
            elif isinstance(n, ast.arg):
                names.add(n.arg)
        self.rng = rng
        self.new = {n: f"x{rng.randrange(10**6)}_{i}" for i, n in enumerate(sorted(names - KEEP))}

    def visit_Name(self, node):
        node.id = self.new.get(node.id, node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.new.get(node.arg, node.arg)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        node.attr = self.new.get(node.attr, node.attr)
        return node

    def _body(self, node):
        self.generic_visit(node)
        node.name = self.new.get(node.name, node.name)
        if ast.get_docstring(node) is not None and len(node.body) > 1:
            node.body = node.body[1:]
        return node

    def visit_FunctionDef(self, node):
        return self._body(node)

    def visit_ClassDef(self, node):
        node = self._body(node)
        methods = [b for b in node.body if isinstance(b, ast.FunctionDef)]
        self.rng.shuffle(methods)
        node.body = [b for b in node.body if not isinstance(b, ast.FunctionDef)] + methods
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value:
            node.value = " ".join(reversed(node.value.split(" ")))
        elif type(node.value) is int:
            node.value += 3
        return node


def disguise(source: str, seed: int = 0) -> str:
    tree = ast.parse(source)
    out = ast.unparse(_Disguise(tree, random.Random(seed)).visit(tree))
    assert out != source
    compile(out, "<disguised>", "exec")
    return out


def test_there_are_enough_seeds_to_test_against():
    assert len(SEEDS) >= 10


@pytest.fixture(scope="module")
def seed_index() -> NoveltyIndex:
    index = NoveltyIndex()
    for key, source in SEEDS.items():
        index.add(key, source)
    return index


def test_seeds_are_mutually_novel(seed_index):
    for name, source in SEEDS.items():
        result = seed_index.check(source, exclude={name})
        assert result.novel, f"{name}: {result.reason}"
    assert not seed_index.check(SEEDS["nim_duel"]).novel  # exclude really was what let them pass


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_disguised_copy_of_each_seed_is_a_duplicate(name, seed_index):
    result = seed_index.check(disguise(SEEDS[name], seed=len(name)))
    assert not result.novel and result.nearest == name, result.reason
    assert "duplicate" in result.reason and name in result.reason


def test_identical_copy_with_new_comments_is_a_duplicate():
    name, source = next(iter(SEEDS.items()))
    noisy = "# my own environment\n" + source.replace("\n\n", "\n\n# step\n", 3)
    novel, reason = is_novel(noisy, {name: source})
    assert not novel and "duplicate" in reason


def test_small_edit_is_still_a_near_duplicate():
    """Copy a seed and change one rule plus add a small method: still the same environment."""
    name = "nim_duel"
    source = SEEDS[name]
    edited = source.replace("sum(self.heaps) >= 8", "sum(self.heaps) >= 8 and max(self.heaps) > 2").replace(
        "    def hint(self) -> str:",
        "    def total(self) -> int:\n        return sum(self.heaps)\n\n    def hint(self) -> str:",
    )
    assert edited != source
    novel, reason = is_novel(disguise(edited, 5), SEEDS)
    assert not novel and name in reason, reason


def test_contract_examples_are_novel_against_the_seeds(seed_index):
    for kind, source in contract_examples().items():
        result = seed_index.check(source)
        assert result.novel, f"{kind}: {result.reason}"


def test_empty_archive_and_list_archive():
    source = SEEDS["nim_duel"]
    assert is_novel(source, [])[0]
    novel, reason = is_novel(source, [SEEDS["grid_maze"], source])
    assert not novel and "#1" in reason


def test_index_add_remove_and_unparseable_sources():
    index = NoveltyIndex()
    index.add("a", SEEDS["grid_maze"])
    assert "a" in index and len(index) == 1
    assert not index.check(SEEDS["grid_maze"]).novel
    index.remove("a")
    assert index.check(SEEDS["grid_maze"]).novel
    broken = SEEDS["grid_maze"].replace("def ", "def (", 1)
    index.add("broken", broken)
    assert not index.check(broken).novel  # text view still works without an AST
    fp = fingerprint(broken)
    assert fp.digest.startswith("text:") and not fp.structure and fp.text


# ------------------------------------------------------------------------------------ parameter variants
def _variant_index(limit: int) -> NoveltyIndex:
    index = NoveltyIndex(NoveltyConfig(max_param_variants=limit))
    index.add("seed-nim_duel", load_seed_source("nim_duel"))
    return index


def test_a_variant_with_new_constants_is_a_duplicate_by_default_and_a_variant_when_allowed():
    from spade_jax.envs.variants import make_variants

    variant = make_variants("nim_duel", 1, direction="harder")[0].source
    strict = _variant_index(0).check(variant)
    assert not strict.novel and "duplicate" in strict.reason
    allowed = _variant_index(2).check(variant)
    assert allowed.novel and allowed.reason.startswith("parameter variant of 'seed-nim_duel'")
    assert "MAX_HEAP" in allowed.reason or "HEAPS" in allowed.reason  # names the constants that moved


def test_a_renamed_copy_with_the_same_constants_is_still_a_copy():
    source = load_seed_source("nim_duel")
    renamed = source.replace('NAME = "nim_duel"', 'NAME = "stone_piles"').replace("class NimDuel", "class StonePiles")
    assert renamed != source
    result = _variant_index(3).check(renamed)
    assert not result.novel and "constants equal" in result.reason


def test_a_variant_family_is_bounded():
    from spade_jax.envs.variants import make_variants

    index = _variant_index(2)
    variants = [v.source for v in make_variants("nim_duel", 4, direction="any")]
    accepted = []
    for i, src in enumerate(variants):
        verdict = index.check(src)
        if verdict.novel:
            index.add(f"v{i}", src)
            accepted.append(i)
    assert accepted == [0, 1]  # the seed and two variants: the family is full
    assert "family already holds 3" in index.check(variants[2]).reason


def test_changing_a_lower_case_literal_is_not_a_variant():
    source = load_seed_source("simon_recall")
    tree = ast.parse(source)
    lowered = [
        n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) > 8
    ]
    assert lowered, "simon_recall has message strings"
    edited = source.replace(lowered[0].value, lowered[0].value + " now", 1)
    index = NoveltyIndex(NoveltyConfig(max_param_variants=3))
    index.add("seed", source)
    assert not index.check(edited).novel
