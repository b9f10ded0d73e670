"""Prefill of a batch of fresh prompts, with the prefix every row shares computed once.

When the rows of a batch start with the same `min_shared` or more tokens (designer prompts share the contract)
and sharing spares at least `min_saving` prompt tokens (shared length x (rows - 1); below that one more
compiled program costs more than it saves), that prefix is prefilled once, as one row, and its KV placed in
every row; the last `keep` such prefixes are kept, keyed by their token ids, for later batches, and dropped by
`clear` (KV of old weights is never reused). Same values as a full prefill, to float rounding.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from spade_jax.model.kv_cache import KVCache
from spade_jax.sampling import buckets as bk
from spade_jax.sampling.prefill import prefill, prefix_kv
from spade_jax.sampling.runtime import Runtime


def common_prefix_len(rows: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every row has in common."""
    first, n = rows[0], min(len(r) for r in rows)
    for r in rows[1:]:
        n = next((i for i in range(n) if r[i] != first[i]), n)
    return n


class Prefiller:
    """Prefills left-padded prompt batches through the runtime's compiled programs (see module doc)."""

    def __init__(self, runtime: Runtime, prompt_buckets: Sequence[int], *, min_shared: int, min_saving: int,
                 keep: int):  # fmt: skip
        self.rt, self.prompt_buckets = runtime, tuple(prompt_buckets)
        self.min_shared, self.min_saving, self.keep = int(min_shared), int(min_saving), int(keep)
        self._prefixes: collections.OrderedDict[tuple[int, ...], KVCache] = collections.OrderedDict()
        self.tokens_reused = 0  # prompt tokens not prefilled thanks to a shared prefix (all batches)

    def clear(self) -> None:
        """Forgets every kept prefix (after a weight update)."""
        self._prefixes.clear()

    def __call__(self, rows: list[list[int]], tokens: np.ndarray, pad_len: np.ndarray, cache_len: int):
        """(logits [B, V], cache [B, .., cache_len]) of `tokens` [B, P] (rows: the real prompts, first)."""
        rt = self.rt
        shared, kv = self._shared_prefix(rows)
        args = (rt.state, rt.put(tokens, ("batch", "length")), rt.put_rows(pad_len))
        if kv is None:

            def fn(state, tokens, pad_len):
                return prefill(rt.model(state), tokens, pad_len, cache_len=cache_len)

            return rt.run(("prefill", *tokens.shape, cache_len), fn, args)

        def fn_shared(state, tokens, pad_len, prefix, start):
            return prefill(rt.model(state), tokens, pad_len, cache_len=cache_len, prefix=prefix, start=start)

        start = int(pad_len[: len(rows)].min()) + shared
        self.tokens_reused += shared * (len(rows) - 1)
        key = ("prefill-shared", *tokens.shape, cache_len, kv.length)
        return rt.run(key, fn_shared, (*args, kv, rt.put(np.int32(start))))

    def _shared_prefix(self, rows: list[list[int]]) -> tuple[int, KVCache | None]:
        """(length, one-row KV) of the prompt prefix all rows share, from the kept prefixes or computed now;
        (0, None) below `min_shared` tokens, when it would spare fewer than `min_saving` tokens, or for a
        single row. The length is rounded down to a multiple of 64, so batches whose rows share slightly
        different prefixes still find it."""
        shared = common_prefix_len(rows) // 64 * 64 if len(rows) > 1 and self.min_shared > 0 else 0
        if shared < max(self.min_shared, 64) or shared * (len(rows) - 1) < self.min_saving:
            return 0, None
        key = tuple(rows[0][:shared])
        kv = self._prefixes.pop(key, None)
        if kv is None:
            padded = np.zeros((1, bk.pick(self.prompt_buckets, shared)), np.int32)
            padded[0, :shared] = key
            rt = self.rt
            kv = rt.run(
                ("prefix", padded.shape[1]), lambda st, t: prefix_kv(rt.model(st), t), (rt.state, rt.put(padded))
            )
        self._prefixes[key] = kv
        while len(self._prefixes) > self.keep:
            self._prefixes.popitem(last=False)
        return shared, kv
