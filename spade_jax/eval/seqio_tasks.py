"""Optional seqio registration of the single-turn suites (seqio is in the `eval` extra: it pulls TensorFlow).

`register_seqio_tasks()` adds `spade_<suite>` tasks whose examples are {"inputs": prompt, "targets": answer}
and whose metric functions are ours (math equivalence, reasoning-gym check). The core evaluation path never
needs seqio; without it this returns an empty list.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register_seqio_tasks", "seqio_available"]

_SUITES = ("champ", "reasoning_gym")


def seqio_available() -> bool:
    """True when seqio (and so TensorFlow) can be imported."""
    try:
        import seqio  # noqa: F401
    except Exception:  # ImportError, or TensorFlow failing to load
        return False
    return True


def _examples(name: str, limit: int | None) -> list[dict[str, str]]:
    from spade_jax.eval.registry import make_suite

    suite = make_suite(name)
    rows = []
    for item in suite.load(limit):
        prompt = "\n".join(m["content"] for m in suite.conversation(item))
        rows.append({"inputs": prompt, "targets": str(item["answer"])})
    return rows


def _metric(name: str):
    from spade_jax.envs.rg_check import rg_answer_ok
    from spade_jax.eval.answers import final_answer, math_equal

    check = rg_answer_ok if name == "reasoning_gym" else (lambda p, g: math_equal(p, g))

    def accuracy(targets: list[Any], predictions: list[Any]) -> dict[str, float]:
        def text(x: Any) -> str:
            return x.decode() if isinstance(x, bytes) else str(x)

        hits = [check(final_answer(text(p)), text(t)) for t, p in zip(targets, predictions)]
        return {"accuracy": sum(hits) / max(1, len(hits))}

    return accuracy


def register_seqio_tasks(limit: int | None = None) -> list[str]:
    """Registers the tasks when seqio is importable; returns their names (empty without seqio)."""
    if not seqio_available():
        return []
    import seqio
    import tensorflow as tf

    names = []
    for suite in _SUITES:
        task = f"spade_{suite}"
        if task in seqio.TaskRegistry.names():
            names.append(task)
            continue
        rows = _examples(suite, limit)

        def dataset_fn(split: str, shuffle_files: bool, seed: int | None = None, rows=rows):
            return tf.data.Dataset.from_tensor_slices(
                {"inputs": [r["inputs"] for r in rows], "targets": [r["targets"] for r in rows]}
            )

        seqio.TaskRegistry.add(
            task,
            source=seqio.FunctionDataSource(dataset_fn, splits=("test",)),
            output_features={
                "inputs": seqio.Feature(seqio.PassThroughVocabulary(1), dtype=tf.string, rank=0, add_eos=False),
                "targets": seqio.Feature(seqio.PassThroughVocabulary(1), dtype=tf.string, rank=0, add_eos=False),
            },
            preprocessors=[],
            metric_fns=[_metric(suite)],
        )
        names.append(task)
    return names
