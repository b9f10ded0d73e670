"""Metric functions of the evaluation suites (pure Python): pass@k, means with standard errors."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean", "pass_at_k", "pass_at_k_mean", "stderr"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with `n` samples of which `c` passed: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and k >= 1 (n={n}, c={c}, k={k})")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    # product form avoids huge binomials: C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_mean(results: Sequence[Sequence[bool]], k: int) -> float:
    """Mean unbiased pass@k over problems, each given as its list of per-sample pass flags."""
    if not results:
        return 0.0
    return sum(pass_at_k(len(r), sum(bool(x) for x in r), k) for r in results) / len(results)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean (0.0 for no values)."""
    return sum(values) / len(values) if values else 0.0


def stderr(values: Sequence[float]) -> float:
    """Standard error of the mean (sample std / sqrt(n)); 0.0 below two values."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)
