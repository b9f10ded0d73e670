"""The decode engine: a batch of slots that requests enter as soon as one is free (continuous batching).

Driven synchronously: `submit(request)` queues, `step()` admits queued requests into free slots in submission
order, runs one compiled chunk of decode steps for every slot, and returns the requests that finished in it
(each with its `completion`); finished rows free their slots at once, and the rest keep decoding at the next
step. Nothing depends on timing: the same submissions give the same schedule, tokens and log-probs.

Layout. Every row writes its next token's keys and values at one cache column (`column`); row b's tokens sit
at columns [pad_len[b], column), so positions are column - pad_len. A fresh request of L prompt tokens is
prefilled (a batch of admissions left-padded to a prompt bucket P, a shared prefix computed once:
prefixes.py) and copied into its slot at columns [column - P, column), pad_len = column - L. When the column
nears the cache's end, every row moves left by the smallest pad_len of the rows still needed (one compiled
gather), and the cache length follows the rows' needs by buckets (grown, or shrunk once it is more than twice
what they need); when an admission needs column >= P, the rows move right.

Reuse. A finished row's keys and values stay in its slot (parked) until the slot is taken. A request whose
prompt starts with a parked row's tokens (at least `min_reuse` of them: the next turn of a conversation, a
prompt after a shared system text) is admitted into that slot: only its new tokens are prefilled, on top of
the parked ones (prefill.extend), and both parts are moved to end at the write column. Fresh requests take
free slots that hold nothing first, then the longest-parked ones. Reused values equal a fresh prefill's to
float rounding, not bit for bit, so what is kept must depend only on the requests of one unit of work: the
owner drops it when the unit ends (`cancel()` with nothing pending; `Sampler.forget`), so a process that starts
afresh (a resumed run) makes the same decisions.

Batch. The batch is a bucket of rows (buckets.py) that grows when queued requests need more slots (up to the
largest bucket: the engine's slot count) and shrinks when few rows remain (at the tail of a generation), so
slot-steps are not spent on empty rows; `slot_steps` counts decode steps x rows computed, `tokens_generated`
the tokens returned.

Failure: a request whose prompt does not fit is refused by its maker (Sampler.submit), before it is queued.
An exception inside `step` (a device error, an interrupt) drops every queued and running request and the cache
(`cancel`), then propagates: the engine is empty and usable again, and the owners' requests never complete.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from spade_jax.model.kv_cache import KVCache
from spade_jax.sampling import buckets as bk
from spade_jax.sampling import decode as dec
from spade_jax.sampling import slots, stops
from spade_jax.sampling.prefill import extend
from spade_jax.sampling.prefixes import Prefiller
from spade_jax.sampling.requests import Request, key_data
from spade_jax.sampling.rows import RowTable
from spade_jax.sampling.runtime import Runtime


@dataclass
class _Parked:
    """A finished row's tokens, whose keys and values are still in its slot from column `start`."""

    tokens: list[int]
    start: int
    order: int


def _pow2(n: int, smallest: int) -> int:
    """The smallest power of two >= max(n, smallest)."""
    return 1 << (max(n, smallest) - 1).bit_length()


def _lcp(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists (list compares run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


class DecodeEngine:
    """Continuous batching over a fixed set of slot shapes (see module doc)."""

    def __init__(self, runtime: Runtime, tokenizer: Any, prefiller: Prefiller, *, batch_buckets: Sequence[int],
                 prompt_buckets: Sequence[int], cache_buckets: Sequence[int], chunk_steps: int,
                 cache_growth: bool = True, min_reuse: int = 64, shrink_batch: bool = True):  # fmt: skip
        self.rt, self.tokenizer, self.prefill = runtime, tokenizer, prefiller
        self.batch_buckets, self.prompt_buckets = tuple(batch_buckets), tuple(prompt_buckets)
        # rows of an admission's prefill: the powers of two among the batch buckets (and the largest)
        self.admit_buckets = tuple(b for b in self.batch_buckets if b & (b - 1) == 0 or b == self.batch_buckets[-1])
        self.cache_buckets = tuple(cache_buckets)
        self.chunk_steps, self.cache_growth, self.min_reuse = int(chunk_steps), cache_growth, int(min_reuse)
        self.shrink_batch = shrink_batch
        self.queue: collections.deque[Request] = collections.deque()
        self.rows: RowTable | None = None
        self.cache: KVCache | None = None
        self.logits: jax.Array | None = None
        self.column = 0
        self.parked: dict[int, _Parked] = {}
        self._parks = 0
        self.slot_steps = 0  # decode steps times batch rows computed (free and finished rows included)
        self.tokens_generated = 0  # tokens returned: slot utilisation = tokens_generated / slot_steps
        self.tokens_reused = 0  # prompt tokens not prefilled thanks to a parked row
        # KV cache slots attended by decode steps, summed over steps and rows: the running rows' own (live) ones,
        # and all (B x cache length, what the XLA attention reads); their ratio is the live share of KV reads
        self.kv_live_reads = 0
        self.kv_reads = 0
        self.stats: collections.Counter = collections.Counter()  # admissions, column moves and resizes, by kind
        self.key_shape = key_data(0, 0).shape

    # ----------------------------------------------------------------------------------------- public API
    @property
    def pending(self) -> int:
        """Requests queued or running."""
        return len(self.queue) + (len(self.rows.live()) if self.rows is not None else 0)

    def submit(self, req: Request) -> None:
        """Queues a request; it is admitted at a later `step`, after those submitted before it."""
        self.queue.append(req)

    def step(self, expect: int = 0, eager: bool = False) -> list[Request]:
        """Admits queued requests, runs one chunk, returns the requests that finished (in slot order). `expect`:
        requests the caller will submit soon (the batch is not shrunk below what they need). `eager`: the caller
        follows finished requests with new ones (a conversation's next turn), so the chunk ends once a sixteenth of
        the rows are done instead of running on with their slots idle."""
        if not self.pending:
            return []
        try:
            self._size_batch(expect)
            fresh, cont = self._choose_slots()
            p_fresh = self._prompt_bucket(max(len(r.prompt) for r, _ in fresh)) if fresh else 0
            if self.cache is None or not (cont or self.rows.live()):
                self._start(fresh, p_fresh)
            else:
                q, p_cont = self._continue_buckets(cont)
                self._make_room(fresh, cont, max(p_fresh, p_cont))
                self._admit_fresh(fresh, p_fresh)
                self._admit_continued(cont, q, p_cont)
            return self._decode(expect, eager)
        except BaseException:
            self.cancel()
            raise

    def cancel(self, requests: Sequence[Request] | None = None) -> None:
        """Drops the given requests (all, and the cache, when None) wherever they are; they never complete."""
        if requests is None:
            self.queue.clear()
            self.rows, self.cache, self.logits, self.column = None, None, None, 0
            self.parked.clear()
            return
        drop = {id(r) for r in requests}
        self.queue = collections.deque(r for r in self.queue if id(r) not in drop)
        if self.rows is not None:
            for b in self.rows.live():
                if id(self.rows.requests[b]) in drop:
                    self.rows.release(b, self.column)

    def release(self) -> None:
        """Frees the KV cache, the logits and every parked row (the next request starts fresh, at the cost of a
        prefill): between phases that do not sample, e.g. while the learner steps, so that the cache's memory
        (gigabytes at 32 rows of 2K tokens) serves the learner instead of adding to it. RuntimeError while
        requests run."""
        if self.pending:
            raise RuntimeError(f"{self.pending} requests are still queued or running: finish or cancel them first")
        self.rows, self.cache, self.logits = None, None, None
        self.parked.clear()

    def invalidate(self) -> None:
        """Forgets every parked row (their keys and values came from the old weights)."""
        if self.pending:
            raise RuntimeError(f"{self.pending} requests are still queued or running: finish or cancel them first")
        self.parked.clear()

    # ------------------------------------------------------------------------------------------- batch size
    def _size_batch(self, expect: int) -> None:
        rows = self.rows
        live = len(rows.live()) if rows is not None else 0
        need, keep = (bk.pick(self.batch_buckets, min(self.batch_buckets[-1], max(1, live + len(self.queue) + e)))
                      for e in (0, expect))  # fmt: skip
        if rows is None or (need != rows.batch and not live and not self.parked):  # a fresh start
            self.rows, self.cache = RowTable(need, self.key_shape), None
            self.parked.clear()
        elif need > rows.batch:  # grown for the requests queued now, not for those expected (empty rows cost)
            self._resize(need)
        elif keep < rows.batch and self.shrink_batch:  # shrunk, but not below what the expected ones need
            self._resize(keep)

    def _resize(self, batch: int) -> None:
        """The batch as `batch` rows: live rows first, then parked ones (most recent first), then free slots."""
        rows = self.rows
        if batch > rows.batch:
            perm = list(range(rows.batch)) + [-1] * (batch - rows.batch)
        else:
            wanted = {
                b for r in self.queue for b, p in self.parked.items() if self._reusable(p, r) >= self.min_reuse > 0
            }
            recent = sorted(self.parked, key=lambda b: (b not in wanted, -self.parked[b].order))
            perm = (rows.live() + recent)[:batch]
            perm += [-1] * (batch - len(perm))
        perm = np.asarray(perm, np.int32)
        self.stats["grow_batch" if batch > rows.batch else "shrink_batch"] += 1
        key = ("permute", rows.batch, batch, self.cache.length)
        self.cache, self.logits = self.rt.run(
            key, slots.permute, (self.cache, self.logits, self.rt.put(np.maximum(perm, 0)))
        )
        self.parked = {i: self.parked[int(j)] for i, j in enumerate(perm) if j >= 0 and int(j) in self.parked}
        rows.permute(perm, self.column)

    # ----------------------------------------------------------------------------------------- admission
    def _choose_slots(self) -> tuple[list[tuple[Request, int]], list[tuple[Request, int, int]]]:
        """(fresh (request, slot) pairs, continued (request, slot, reused tokens) triples) for the queued
        requests that get a slot now, in submission order."""
        rows = self.rows
        free = [b for b in range(rows.batch) if rows.requests[b] is None]
        take = [self.queue.popleft() for _ in range(min(len(free), len(self.queue)))]
        claims: dict[int, tuple[int, int]] = {}  # request number -> (slot, reused)
        for i, req in enumerate(take):
            best = (0, -1)
            for b in free:
                p = self.parked.get(b)
                if p is not None and all(b != c[0] for c in claims.values()):
                    best = max(best, (self._reusable(p, req), -b))
            if self.min_reuse > 0 and best[0] >= self.min_reuse:
                claims[i] = (-best[1], best[0])
        claimed = {b for b, _ in claims.values()}
        spare = sorted((b for b in free if b not in claimed), key=lambda b: (b in self.parked, self._age(b), b))
        fresh, cont = [], []
        for i, req in enumerate(take):
            if i in claims:
                cont.append((req, *claims[i]))
            else:
                fresh.append((req, spare.pop(0)))
        return fresh, cont

    def _reusable(self, p: _Parked, req: Request) -> int:
        """How many of the request's prompt tokens the parked row can give (0 when too far left to keep)."""
        if self.column - p.start + req.budget + self.chunk_steps > self.cache_buckets[-1]:
            return 0
        return min(_lcp(p.tokens, req.prompt), len(req.prompt) - 1)

    def _age(self, b: int) -> int:
        p = self.parked.get(b)
        return p.order if p is not None else -1

    def _prompt_bucket(self, n: int) -> int:
        return bk.pick(self.prompt_buckets, n)

    def _continue_buckets(self, cont: list[tuple[Request, int, int]]) -> tuple[int, int]:
        """(new-token bucket Q, block length P >= reused + Q for every row) of the continued admissions, powers
        of two (their programs are keyed by both, and by the rows: coarse steps keep them few)."""
        if not cont:
            return 0, 0
        q = _pow2(max(len(r.prompt) - m for r, _, m in cont), 32)
        return q, _pow2(max(m for _, _, m in cont) + q, 64)

    def _start(self, fresh: list[tuple[Request, int]], p: int) -> None:
        """A fresh start (no row running, none reused): one prefill of every slot (free ones as padding) makes
        the cache, the prompts ending at column p."""
        rows = self.rows
        fresh = [(req, i) for i, (req, _) in enumerate(fresh)]  # slots 0..n-1: the prompts first, as prefill takes them
        self.column = p
        room = min(self.chunk_steps, max(r.budget for r, _ in fresh))
        length = self._cache_bucket(p + self._ahead(p, max(r.budget for r, _ in fresh), room))
        self.parked.clear()
        rows.pad_len[:] = p
        if bk.pick(self.batch_buckets, len(fresh)) < rows.batch:  # free slots kept for later: no prefill of them
            self._allocate(length)
            self._admit_fresh(fresh, p)
            return
        tokens = np.zeros((rows.batch, p), np.int32)
        pad = np.full((rows.batch,), p - 1, np.int32)
        for req, b in fresh:
            tokens[b, p - len(req.prompt) :] = req.prompt
            pad[b] = p - len(req.prompt)
        self.logits, self.cache = self.prefill([r.prompt for r, _ in fresh], tokens, pad, length)
        for req, b in fresh:
            rows.admit(b, req, p - len(req.prompt))
        self.stats["fresh"] += len(fresh)

    def _allocate(self, length: int) -> None:
        """An empty cache of `length` columns for every slot."""
        rt, b = self.rt, self.rows.batch
        if rt.mesh is None:
            self.cache = KVCache.zeros(rt.cfg, b, length)
        else:
            self.cache = rt.run(("zeros", b, length), lambda: KVCache.zeros(rt.cfg, b, length).constrained(), ())
        self.logits = rt.put_rows(np.zeros((b, rt.cfg.vocab_size), np.float32))

    def _admit_fresh(self, fresh: list[tuple[Request, int]], p: int) -> None:
        """Prefills the fresh admissions (prompt bucket p) and copies them into their slots."""
        if not fresh:
            return
        rows, t = self.rows, self.column
        nb = bk.pick(self.admit_buckets, len(fresh))
        tokens = np.zeros((nb, p), np.int32)
        pad = np.full((nb,), p - 1, np.int32)
        dest = np.full((nb,), rows.batch, np.int32)  # padding rows go nowhere
        for i, (req, b) in enumerate(fresh):
            tokens[i, p - len(req.prompt) :] = req.prompt
            pad[i], dest[i] = p - len(req.prompt), b
        logits, block = self.prefill([r.prompt for r, _ in fresh], tokens, pad, p)
        src = np.broadcast_to(np.arange(p, dtype=np.int32), (nb, p))
        self._insert(block, logits, dest, src, t - p)
        for req, b in fresh:
            self.parked.pop(b, None)
            rows.admit(b, req, t - len(req.prompt))
        self.stats["fresh"] += len(fresh)

    def _admit_continued(self, cont: list[tuple[Request, int, int]], q: int, p: int) -> None:
        """Prefills only the new tokens of the continued admissions on top of their parked rows (new tokens
        left-padded to q, blocks of p columns), and moves both parts to end at the write column."""
        if not cont:
            return
        rt, rows, t = self.rt, self.rows, self.column
        nb = bk.pick(self.admit_buckets, len(cont))
        tokens = np.zeros((nb, q), np.int32)
        reused, new = np.zeros(nb, np.int32), np.ones(nb, np.int32)
        dest = np.full((nb,), rows.batch, np.int32)
        gather_src = np.full((nb, p), -1, np.int32)
        insert_src = np.broadcast_to(np.arange(p, dtype=np.int32), (nb, p)).copy()
        cols = np.arange(p, dtype=np.int32)
        for i, (req, b, m) in enumerate(cont):
            k = len(req.prompt) - m
            tokens[i, q - k :] = req.prompt[m:]
            reused[i], new[i], dest[i] = m, k, b
            first = p - q - m  # the buffer column of the first reused token
            gather_src[i, first : p - q] = self.parked[b].start + np.arange(m)
            insert_src[i] = np.where(cols >= p - k, cols, np.maximum(cols - (q - k), 0))
        buf = rt.run(("gather", rows.batch, self.cache.length, nb, p), slots.gather,
                     (self.cache, rt.put(dest), rt.put(gather_src)))  # fmt: skip

        def fn(state, buf, tokens, reused, new):
            return extend(rt.model(state), buf, tokens, reused, new)

        args = (rt.state, buf, rt.put(tokens, ("batch", "length")), rt.put_rows(reused), rt.put_rows(new))
        logits, buf = rt.run(("extend", nb, q, p), fn, args, donate=(1,))
        self._insert(buf, logits, dest, insert_src, t - p)
        for req, b, m in cont:
            del self.parked[b]
            self.tokens_reused += m
            rows.admit(b, req, t - len(req.prompt))
        self.stats["continued"] += len(cont)

    def _insert(self, block: KVCache, logits: jax.Array, dest: np.ndarray, src: np.ndarray, col0: int) -> None:
        rt = self.rt
        key = ("insert", self.rows.batch, self.cache.length, *src.shape)
        args = (self.cache, self.logits, block, logits, rt.put(dest), rt.put(src), rt.put(np.int32(col0)))
        self.cache, self.logits = rt.run(key, slots.insert, args, donate=(0, 1))

    # -------------------------------------------------------------------------------------------- columns
    def _make_room(self, fresh: list, cont: list, need_t: int) -> None:
        """Moves the columns (and sizes the cache) so the admissions' blocks (need_t columns) fit left of the
        write column and the next chunk fits right of it; the cache grows ahead by about what the rows hold."""
        rows = self.rows
        live = rows.live()
        keep = [int(rows.pad_len[b]) for b in live] + [self.parked[b].start for _, b, _ in cont]
        remaining = [int(rows.budget[b] - rows.generated[b]) for b in live] + [r.budget for r, *_ in fresh + cont]
        room = min(self.chunk_steps, max(remaining))
        t, s = self.column, self.cache.length
        t_new = max(t - min(keep, default=t), need_t)
        want = self._cache_bucket(t_new + self._ahead(t_new, max(remaining), room))
        if t >= need_t and t + room <= s and s <= 2 * want:
            return
        self._relayout(t - t_new, want)
        if self.cache.length - self.column < 1:
            raise RuntimeError(f"no cache column left at {self.column} of {self.cache.length} (a bug)")

    def _ahead(self, held: int, remaining: int, room: int) -> int:
        """Columns to provide past the write column: all that is left without cache growth, else about as many
        as the rows already hold (the cache doubles), at least the next chunk."""
        if not self.cache_growth:
            return max(remaining, room)
        return max(room, min(remaining, max(held, self.chunk_steps)))

    def _cache_bucket(self, n: int) -> int:
        return bk.pick(self.cache_buckets, min(n, self.cache_buckets[-1]))

    def _relayout(self, d: int, length: int) -> None:
        """Every row moved left by d columns (right when negative), the cache `length` columns long."""
        self.stats["move_left" if d > 0 else "move_right" if d < 0 else "resize_columns"] += 1
        key = ("relayout", self.rows.batch, self.cache.length, length)
        self.cache = self.rt.run(key, lambda c, d: slots.relayout(c, d, length), (self.cache, self.rt.put(np.int32(d))))
        self.column -= d
        self.rows.shift(d)
        self.rows.pad_len[[b for b in range(self.rows.batch) if self.rows.requests[b] is None]] = self.column
        for b, p in list(self.parked.items()):
            p.start -= d
            if p.start < 0:
                del self.parked[b]

    # --------------------------------------------------------------------------------------------- decode
    def _decode(self, expect: int, eager: bool = False) -> list[Request]:
        rt, rows, b = self.rt, self.rows, self.rows.batch
        live = rows.live()
        remaining = max(int(rows.budget[i] - rows.generated[i]) for i in live)
        n_steps = min(self.chunk_steps, self.cache.length - self.column, remaining)
        exit_done = b
        if self.queue or expect:  # requests wait for slots: hand the finished rows back once a few are done
            exit_done = min(b, int(rows.done.sum()) + max(1, min(len(self.queue) + expect, b // 8)))
        elif eager:  # their owners follow them with new requests: hand them back as soon as a few are done
            exit_done = min(b, int(rows.done.sum()) + max(1, b // 16))
        state = rows.state(rt.put_rows, rt.put, self.logits, self.column)
        consts = rows.consts(rt.put_rows)
        layouts = rt.layouts(b)
        width = self.chunk_steps

        def fn(params, layouts, cache, state, consts, n_steps, exit_done):
            model = rt.model(params)
            return dec.decode_chunk(model, cache, state, consts, n_steps, exit_done, width=width, layouts=layouts)

        key = ("decode", b, self.cache.length, width)
        args = (rt.state, layouts, self.cache, state, consts, rt.put(np.int32(n_steps)), rt.put(np.int32(exit_done)))
        self.cache, state, toks, lps, raws = rt.run(key, fn, args, donate=(2, 3))
        self.logits = state.logits
        wanted = (toks, lps, raws, state.generated, state.done, state.finish, state.recent, state.column)
        for x in wanted:  # queued behind the chunk: the copies start as it ends, while the host counts below
            x.copy_to_host_async()
        held = int(np.sum(self.column - rows.pad_len[live]))  # slots the running rows attend at the chunk start
        toks, lps, raws, generated, done, finish, recent, column = jax.device_get(wanted)
        taken = int(column) - self.column
        self.slot_steps += b * taken
        self.kv_live_reads += held * taken
        self.kv_reads += b * self.cache.length * taken
        self.column = int(column)
        rows.absorb(generated, done, finish, recent)
        finished = []
        for i in live:
            req = rows.requests[i]
            before = len(req.tokens)
            req.absorb(toks[i], lps[i], raws[i], int(generated[i]) - before)
            code = int(finish[i]) if done[i] else None
            if code is None and stops.tail_has_stop(self.tokenizer, req.tokens, before, req.params.stop_strings):
                code = dec.HOST_STOP
            if code is not None:
                finished.append(self._finish(i, req, code))
        return finished

    def _finish(self, b: int, req: Request, code: int) -> Request:
        rows = self.rows
        req.finish(self.tokenizer, code)
        self.tokens_generated += len(req.tokens)
        self._parks += 1
        self.parked[b] = _Parked(req.prompt + req.tokens, int(rows.pad_len[b]), self._parks)
        rows.release(b, self.column)
        return req
