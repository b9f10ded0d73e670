"""The processes of a job as self-play sees them: which block of a list of work this host does, and how every
host's results reach every host.

Self-play on several hosts divides its work, it does not repeat it: designs, hints, plays, audits and held-out
plays are lists of independent items, and `Hosts.map` runs this host's contiguous block of a list, then
gathers every host's results so that every host holds all of them, in list order. Everything after that (the
memory, the rounds, the rewards, the learner batch) is computed from the same inputs on every host and is the
same everywhere, so no state has to be sent after the fact. `gather` is a collective: every process calls it
at the same point, in the same order (it rides on `jax.experimental.multihost_utils.process_allgather`).

One process: the block is the whole list and gathering is the identity; nothing imports JAX.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from spade_jax import streams

__all__ = ["Hosts"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Hosts:
    """This process's place in the job (`index` of `count`); process 0 is the leader, the one writer."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"host {self.index} of {self.count}: need 0 <= index < count")

    @classmethod
    def current(cls) -> Hosts:
        """The hosts of the running JAX job (after `distributed.initialize`)."""
        import jax

        return cls(jax.process_index(), jax.process_count())

    @property
    def is_leader(self) -> bool:
        return self.index == 0

    def block(self, n: int) -> range:
        """This host's items of a list of n: a contiguous block, the blocks of hosts 0..count-1 in order and
        within one item of each other in size (an environment's plays stay together, sharing a prefix)."""
        return range(n * self.index // self.count, n * (self.index + 1) // self.count)

    def seed(self, seed: int) -> int:
        """A sampling seed for this host: `seed` itself on the leader (a one-process run is unchanged), a
        stream of it on the others, so two hosts never draw the same numbers for different rows."""
        return seed if self.index == 0 else streams.derive(seed, "host", self.index)

    def gather(self, value: Any) -> list[Any]:
        """Every host's `value` (picklable), in host order. A collective: all hosts call it together."""
        if self.count == 1:
            return [value]
        return [pickle.loads(b) for b in _allgather_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))]

    def map(self, items: Sequence[T], fn: Callable[[list[T]], Sequence[R]]) -> list[R]:
        """`fn` over this host's block of `items` (one result per item; not called on an empty block), then
        every host's results, in item order. A collective when count > 1."""
        if self.count == 1:
            return list(fn(list(items))) if items else []
        mine = self.block(len(items))
        out = list(fn([items[i] for i in mine])) if len(mine) else []
        if len(out) != len(mine):
            raise RuntimeError(f"host {self.index}: {len(out)} results for {len(mine)} items")
        return [r for part in self.gather(out) for r in part]


def _allgather_bytes(blob: bytes) -> list[bytes]:
    """Every process's bytes: their lengths first, then the blobs padded to a power of two (a bounded number
    of gather programs is compiled)."""
    import numpy as np
    from jax.experimental import multihost_utils

    sizes = multihost_utils.process_allgather(np.array([len(blob)], np.int64)).reshape(-1)
    width = 1 << max(int(sizes.max()), 1).bit_length()
    buf = np.zeros(width, np.uint8)
    buf[: len(blob)] = np.frombuffer(blob, np.uint8)
    rows = multihost_utils.process_allgather(buf)
    return [rows[i, : int(n)].tobytes() for i, n in enumerate(sizes)]
