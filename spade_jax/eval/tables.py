"""Rich tables for evaluation results and for the side-by-side comparison of two result files."""

from __future__ import annotations

from rich.table import Table

__all__ = ["compare_table", "main_metric", "results_table"]

_MAIN = ("pass@1", "accuracy", "win_rate")


def main_metric(suite: dict) -> str:
    """The headline metric name of a suite result."""
    metrics = suite.get("metrics", {})
    return next((m for m in _MAIN if m in metrics), next(iter(metrics), ""))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def results_table(results: dict) -> Table:
    """One row per suite: items, headline metric, other metrics, wall time."""
    table = Table(title=f"spade-jax eval: {results.get('model', '?')}")
    for col, just in (("suite", "left"), ("n", "right"), ("metric", "left"), ("score", "right"),
                      ("other", "left"), ("wall s", "right")):  # fmt: skip
        table.add_column(col, justify=just)
    for name, suite in results["suites"].items():
        main = main_metric(suite)
        metrics = suite.get("metrics", {})
        value = metrics.get(main)
        err = metrics.get(f"{main}_stderr")
        score = _fmt(value) + (f" ± {err:.3f}" if err else "")
        other = ", ".join(f"{k}={v:.3g}" for k, v in metrics.items() if k not in (main, f"{main}_stderr"))
        table.add_row(name, str(suite.get("n", 0)), main, score, other, f"{suite.get('wall_s', 0.0):.1f}")
    return table


def compare_table(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> Table:
    """Side-by-side headline metrics of two runs with deltas (B - A); suites missing from one side show '-'."""
    table = Table(title=f"{name_a} vs {name_b}")
    for col in ("suite", "metric", f"{name_a}", f"{name_b}", "delta", "n A/B"):
        table.add_column(col, justify="left" if col in ("suite", "metric") else "right")
    names = list(a["suites"]) + [n for n in b["suites"] if n not in a["suites"]]
    for name in names:
        sa, sb = a["suites"].get(name), b["suites"].get(name)
        metric = main_metric(sa or sb)
        keys = [metric] + [k for k in ("pass@" + str(a["settings"].get("samples", 1)),) if k != metric]
        for key in keys:
            va = (sa or {}).get("metrics", {}).get(key)
            vb = (sb or {}).get("metrics", {}).get(key)
            if va is None and vb is None:
                continue
            if va is not None and vb is not None:
                d = vb - va
                delta = f"[green]{d:+.3f}[/green]" if d > 0 else f"[red]{d:+.3f}[/red]" if d < 0 else "0.000"
            else:
                delta = "-"
            n = f"{(sa or {}).get('n', '-')}/{(sb or {}).get('n', '-')}"
            table.add_row(name, key, _fmt(va), _fmt(vb), delta, n)
    return table
