"""Scorers of the eval suites on hand-made right and wrong answers (no model)."""

import itertools
import math

import pytest

from spade_jax.envs.rg_check import rg_answer_ok
from spade_jax.eval.acebench import calls_match
from spade_jax.eval.answers import choice_letter, final_answer, gold_alternatives, math_equal
from spade_jax.eval.metrics import pass_at_k, pass_at_k_mean, stderr


def _brute_pass_at_k(n, c, k):
    """Probability that a random k-subset of n samples (c correct) holds a correct one, by enumeration."""
    flags = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(flags[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 1, 1), (5, 2, 3), (6, 3, 2), (7, 6, 5), (4, 4, 4), (8, 1, 8)])
def test_pass_at_k_matches_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_edges():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k_mean([[True, False], [False, False]], 1) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
    assert stderr([0.0, 1.0]) == pytest.approx(0.5)
    assert math.isclose(stderr([1.0]), 0.0)


@pytest.mark.parametrize(
    "pred,gold",
    [
        ("2^{n-1}", "2^(n-1)"),
        ("2**(n-1)", "2^(n-1)"),
        ("\\binom{10}{5}", "C(10, 5), or equivalently 252"),
        ("252", "C(10, 5), or equivalently 252"),
        ("\\frac{5}{14}", "5/14, or approximately 35.7%"),
        ("\\frac{n(n-3)}{2}", "n(n-3)/2"),
        ("(n^2-3n)/2", "n(n-3)/2"),
        ("\\sqrt{2}", "sqrt(2)"),
        ("yes.", "Yes"),
        ("No integer solutions", "No integer solutions"),
        ("2^{\\lfloor n/2 \\rfloor} \\lfloor n/2 \\rfloor!", "2^floor(n/2)*floor(n/2)!"),
    ],
)
def test_math_equal_accepts_equivalent(pred, gold):
    assert math_equal(pred, gold)


@pytest.mark.parametrize(
    "pred,gold",
    [
        ("2^n", "2^(n-1)"),
        ("251", "C(10, 5), or equivalently 252"),
        ("n(n+3)/2", "n(n-3)/2"),
        ("No", "Yes"),
        ("2n", "n"),
        ("", "3"),
        (None, "3"),
        ("\\frac{5}{13}", "5/14"),
    ],
)
def test_math_equal_rejects_wrong(pred, gold):
    assert not math_equal(pred, gold)


def test_extraction_helpers():
    assert final_answer("so the total is \\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert final_answer("The final answer is 7.") == "7"
    assert final_answer("no answer here") is None
    assert gold_alternatives("C(10, 5), or equivalently 252") == ["C(10, 5)", "252"]
    assert choice_letter("... so \\boxed{C}") == "C"
    assert choice_letter("The answer is (B).") == "B"
    assert choice_letter("I am not sure") is None


@pytest.mark.parametrize(
    "pred,gold,ok",
    [
        ("48", "48", True),
        ("48.0", "48", True),
        ("797/990", "797/990", True),
        ("1594/1980", "797/990", True),
        ("grandfather", "grandfather", True),
        ("Grandfather.", "grandfather", True),
        ("this,the, it", "this, the, it", True),
        ("grandmother", "grandfather", False),
        ("49", "48", False),
        ("the, this, it", "this, the, it", False),
        (None, "1", False),
    ],
)
def test_reasoning_gym_check(pred, gold, ok):
    assert rg_answer_ok(pred, gold) is ok


def test_reasoning_gym_check_agrees_with_gold_answers():
    from spade_jax.eval.qa_suites import reasoning_gym_items

    items = reasoning_gym_items(40, seed=123)
    assert all(rg_answer_ok(it["answer"], it["answer"]) for it in items)
    wrong = sum(rg_answer_ok(items[(i + 1) % len(items)]["answer"], it["answer"]) for i, it in enumerate(items))
    assert wrong <= 2  # another item's answer is (almost) never right


def test_acebench_call_matching():
    truth = {"get_weather": {"city": "Paris", "days": 3}}
    assert calls_match([{"name": "get_weather", "arguments": {"city": "paris", "days": 3.0}}], truth)
    assert not calls_match([{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}], truth)
    assert not calls_match([], truth)
    two = [{"a": {"x": 1}}, {"b": {}}]
    assert calls_match([{"name": "b", "arguments": {}}, {"name": "a", "arguments": {"x": 1}}], two)
    assert not calls_match([{"name": "a", "arguments": {"x": 1}}], two)


def test_seqio_registration_is_optional():
    from spade_jax.eval.seqio_tasks import register_seqio_tasks, seqio_available

    names = register_seqio_tasks(limit=2)
    assert names == (["spade_champ", "spade_reasoning_gym"] if seqio_available() else [])


def test_seqio_tasks_serve_examples_and_score_with_our_metrics():
    """Runs where the `eval` extra (seqio + TensorFlow) is installed; `make test` does not install it."""
    from spade_jax.eval.seqio_tasks import register_seqio_tasks, seqio_available

    if not seqio_available():
        pytest.skip("seqio is not installed (pip install -e '.[eval]')")
    import seqio

    register_seqio_tasks(limit=2)  # a no-op when the test above registered them already
    task = seqio.get_mixture_or_task("spade_champ")
    rows = list(task.get_dataset(None, split="test", shuffle=False).as_numpy_iterator())
    assert len(rows) == 2 and all(r["inputs"] and r["targets"] for r in rows)
    (metric,) = task.metric_fns
    targets = [r["targets"] for r in rows]
    right = [b"The answer is \\boxed{" + t + b"}" for t in targets]
    assert metric(targets, right)["accuracy"] == 1.0
    assert metric(targets, [b"\\boxed{no answer}"] * 2)["accuracy"] == 0.0
