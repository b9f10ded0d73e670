"""Shape buckets: padded batch sizes, prompt lengths and cache lengths, so varied calls reuse few programs."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

DEFAULT_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def length_buckets(max_len: int, smallest: int = 32) -> tuple[int, ...]:
    """Steps of 1.5x and 2x in turn from `smallest` (32, 48, 64, 96, 128, 192, ...), up to max_len rounded up to a
    multiple of 128: padding wastes at most a third of a bucket, and the count grows with log(max_len)."""
    out, n = [], smallest
    top = -(-max_len // 128) * 128
    while n < top:
        out.append(n)
        if n * 3 // 2 < top:
            out.append(n * 3 // 2)
        n *= 2
    out.append(top)
    return tuple(sorted(set(out)))


def pick(buckets: Sequence[int], n: int) -> int:
    """Smallest bucket >= n (ValueError past the largest)."""
    i = bisect.bisect_left(buckets, n)
    if i == len(buckets):
        raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")
    return buckets[i]


def split_batch(n: int, buckets: Sequence[int]) -> list[tuple[int, int]]:
    """Cuts n rows into (start, stop) pieces of at most the largest batch bucket."""
    step = buckets[-1]
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def batch_buckets(buckets: Sequence[int], slots: int | None = None, mesh: Any = None) -> tuple[int, ...]:
    """The batch buckets up to `slots` rows (slots itself the largest; None: the largest given), each rounded up
    to a multiple of the mesh's data axes so the batch really splits."""
    out = sorted(set(buckets))
    if slots is not None:
        out = sorted({b for b in out if b < slots} | {slots})
    if mesh is not None:
        import numpy as np

        n = int(np.prod([mesh.shape[a] for a in ("data", "fsdp", "expert") if a in mesh.shape]))
        out = sorted({-(-b // n) * n for b in out})
    return tuple(out)
