"""The host's copy of the decode engine's per-row state: which request holds each slot, its settings, and its
progress (tokens generated, done, finish code, last tokens for stop sequences).

The host copy is the truth between compiled chunks: it is sent to the device before a chunk (`state`,
`consts`) and read back after it (`absorb`). Settings are sent again only when they changed (an admission, a
resize). A free slot is done, greedy and never attended (its pad_len is the write column).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spade_jax.sampling import decode as dec
from spade_jax.sampling import stops
from spade_jax.sampling.requests import Request

_SETTINGS = ("pad_len", "budget", "budget_code", "greedy", "temperature", "top_k", "top_p", "keys",
             "stop_ids", "stop_seqs", "stop_used")  # fmt: skip
_PROGRESS = ("generated", "done", "finish", "recent")


class RowTable:
    """Per-slot host arrays of a batch of `batch` rows (see module doc)."""

    def __init__(self, batch: int, key_shape: tuple[int, ...]):
        L, n, m = stops.MAX_STOP_SEQ_LEN, stops.MAX_STOP_IDS, stops.MAX_STOP_SEQS
        self.requests: list[Request | None] = [None] * batch
        self.pad_len = np.zeros(batch, np.int32)
        self.budget = np.ones(batch, np.int32)
        self.budget_code = np.full(batch, dec.LENGTH, np.int32)
        self.greedy = np.ones(batch, bool)
        self.temperature = np.ones(batch, np.float32)
        self.top_k = np.zeros(batch, np.int32)
        self.top_p = np.ones(batch, np.float32)
        self.keys = np.zeros((batch, *key_shape), np.uint32)
        self.stop_ids = np.full((batch, n), -1, np.int32)
        self.stop_seqs = np.full((batch, m, L), -2, np.int32)
        self.stop_used = np.zeros((batch, m, L), bool)
        self.generated = np.zeros(batch, np.int32)
        self.done = np.ones(batch, bool)
        self.finish = np.full(batch, dec.LENGTH, np.int32)
        self.recent = np.full((batch, L), -1, np.int32)
        self._consts: Any = None  # device copy of the settings, None when stale

    @property
    def batch(self) -> int:
        return len(self.requests)

    def live(self) -> list[int]:
        """Slots holding a running request, in slot order."""
        return [b for b, r in enumerate(self.requests) if r is not None]

    def admit(self, b: int, req: Request, pad_len: int) -> None:
        """Slot b starts `req` (its prompt's last token at the column before the write column)."""
        p = req.params
        self.requests[b] = req
        self.pad_len[b] = pad_len
        self.budget[b], self.budget_code[b] = req.budget, req.budget_code
        self.greedy[b] = p.is_greedy
        self.temperature[b] = 1.0 if p.is_greedy else max(p.temperature, 1e-6)
        self.top_k[b], self.top_p[b] = p.top_k, p.top_p
        self.keys[b] = req.key
        self.stop_ids[b], self.stop_seqs[b], self.stop_used[b] = req.stop.ids, req.stop.seqs, req.stop.used
        self.generated[b], self.done[b], self.finish[b], self.recent[b] = 0, False, dec.RUNNING, -1
        self._consts = None

    def release(self, b: int, column: int) -> None:
        """Slot b is free: done, greedy, attending nothing."""
        self.requests[b] = None
        self.done[b], self.greedy[b], self.top_k[b], self.top_p[b] = True, True, 0, 1.0
        self.pad_len[b] = column
        self._consts = None

    def permute(self, perm: np.ndarray, column: int) -> None:
        """Row perm[i] becomes row i; perm[i] < 0 makes row i a free slot (the batch grown or shrunk)."""
        perm = np.asarray(perm)
        src = np.maximum(perm, 0)
        for name in _SETTINGS + _PROGRESS:
            setattr(self, name, getattr(self, name)[src].copy())
        self.requests = [self.requests[j] if j >= 0 else None for j in perm]
        for i in np.flatnonzero(perm < 0):
            self.release(int(i), column)
        self._consts = None

    def shift(self, d: int) -> None:
        """Every column moved left by d (right when negative)."""
        self.pad_len -= d
        self._consts = None

    def consts(self, put_rows) -> dec.RowConsts:
        """The settings on device (sent again only after a change)."""
        if self._consts is None:
            self._consts = dec.RowConsts(**{name: put_rows(getattr(self, name)) for name in _SETTINGS})
        return self._consts

    def state(self, put_rows, put, logits: Any, column: int) -> dec.DecodeState:
        """The progress on device, with the engine's logits and write column."""
        arrays = {name: put_rows(getattr(self, name)) for name in _PROGRESS}
        return dec.DecodeState(logits=logits, column=put(np.int32(column)), **arrays)

    def absorb(self, generated: np.ndarray, done: np.ndarray, finish: np.ndarray, recent: np.ndarray) -> None:
        """The progress read back after a chunk."""
        self.generated, self.finish, self.recent = generated.copy(), finish.copy(), recent.copy()
        self.done = done.copy()
