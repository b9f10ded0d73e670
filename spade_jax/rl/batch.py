"""Training batches for the learner: python samples packed into fixed-shape arrays.

Layout (one convention everywhere in `rl`): every per-token array is aligned with `tokens`, i.e. the value
at [n, t] belongs to token t, which the model predicts from the tokens before it in the same segment.
So `loss_mask[n, t] = 1` trains the prediction of `tokens[n, t]`, and `sampler_logprobs[n, t]` is
log p_sampler(tokens[n, t] | prefix). The first token of every segment has no prediction and is never
trained. Rows are RIGHT-padded (pad tokens at the end, segment id 0, all masks 0); several samples may be
packed into one row, each with its own segment id (1, 2, ...) and positions restarting at 0, and the
learner's attention never crosses segments. Rows hold samples of one role only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import flax.struct
import jax
import numpy as np

from spade_jax.sampling.buckets import DEFAULT_BATCH_BUCKETS
from spade_jax.trajectory import Sample

__all__ = ["Sample", "TrainBatch", "bucket", "pack_sequences", "split_trainable"]


DEFAULT_LENGTH_BUCKETS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@flax.struct.dataclass
class TrainBatch:
    """Fixed-shape arrays for one learner step; N rows of L tokens (see the module docstring for alignment)."""

    tokens: Any  # int32 [N, L]
    positions: Any  # int32 [N, L], restarting at 0 in every segment
    segment_ids: Any  # int32 [N, L], 1.. per packed sample, 0 on padding
    loss_mask: Any  # float32 [N, L], 1 on policy-produced tokens that are trained
    sampler_logprobs: Any  # float32 [N, L], log-prob of each token under the sampler (0 where not trained, NaN unknown)
    advantages: Any  # float32 [N, L], the advantage of the sample each token belongs to
    roles: Any  # int32 [N], 0 agent / 1 designer / -1 padding row
    sample_ids: Any  # int32 [N, L], index of the input sample each token came from, -1 on padding
    old_logprobs: Any = None  # float32 [N, L]: learner log-probs at the sampling policy version (None: on-policy)
    ref_logprobs: Any = None  # float32 [N, L]: frozen reference log-probs, for the KL term
    loss_weights: Any = None  # float32 [N, L]: each token's weight in the loss (None: one token mean); 0 on padding

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.tokens.shape)

    def rows(self, start: int, stop: int) -> TrainBatch:
        """Rows [start, stop) of every array (a micro-batch)."""
        return jax.tree.map(lambda x: x[start:stop], self)


def bucket(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket >= n; past the largest, the next multiple of the largest."""
    for b in sorted(buckets):
        if b >= n:
            return b
    top = max(buckets)
    return -(-n // top) * top


def split_trainable(samples: Sequence[Sample | Mapping[str, Any]], max_len: int) -> tuple[list[Any], int]:
    """(samples of at most `max_len` tokens in input order, how many longer ones were dropped): what the loop
    calls before `pack_sequences`, so a sample that no length bucket holds is counted, never a crash."""
    kept = [s for s in samples if len(Sample.coerce(s)) <= max_len]
    return kept, len(samples) - len(kept)


def _sample_arrays(s: Sample, index: int) -> dict[str, np.ndarray]:
    """Per-token arrays for one sample, aligned with its tokens."""
    p, c = len(s.prompt_ids), len(s.completion_ids)
    if p == 0:
        raise ValueError(f"sample {index}: empty prompt (the first completion token needs a token before it)")
    mask = np.ones(c, np.float32) if s.completion_mask is None else np.asarray(s.completion_mask, np.float32)
    lp = np.full(c, np.nan, np.float32) if s.logprobs is None else np.asarray(s.logprobs, np.float32)
    adv = np.broadcast_to(np.asarray(s.advantage, np.float32), (c,))
    for name, arr in (("completion_mask", mask), ("logprobs", lp), ("advantage", adv)):
        if arr.shape != (c,):
            raise ValueError(f"sample {index}: {name} has {arr.shape[0]} entries for {c} completion tokens")
    zeros = np.zeros(p, np.float32)
    out = dict(
        tokens=np.concatenate([np.asarray(s.prompt_ids, np.int32), np.asarray(s.completion_ids, np.int32)]),
        loss_mask=np.concatenate([zeros, mask]),
        sampler_logprobs=np.concatenate([zeros, np.where(mask > 0, lp, 0.0)]),
        advantages=np.concatenate([zeros, adv]),
    )
    if s.loss_weight is not None:
        out["loss_weights"] = np.concatenate([zeros, np.full(c, s.loss_weight, np.float32)])
    return out


def pack_sequences(
    samples: Sequence[Sample | Mapping[str, Any]],
    *,
    length_buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS,
    batch_buckets: Sequence[int] = DEFAULT_BATCH_BUCKETS,
    pack: bool = True,
    pad_id: int = 0,
) -> TrainBatch:
    """Packs samples into a right-padded `TrainBatch` whose shape comes from the buckets.

    The row length L is the smallest length bucket that holds the longest sample; with `pack`, shorter
    samples of the same role share rows (first-fit, longest first), otherwise one sample per row. The row
    count is rounded up to a batch bucket with empty rows (all masks 0, role -1), so the learner compiles
    once per (length bucket, micro-batch) pair; past the largest batch bucket the row count is the next
    multiple of it (e.g. 65 rows -> 128 with the defaults). Raises ValueError for a sample longer than the
    largest length bucket: drop those first with `split_trainable(samples, max(length_buckets))`.
    """
    if not samples:
        raise ValueError("pack_sequences: no samples")
    items = [Sample.coerce(s) for s in samples]
    weighted = sum(s.loss_weight is not None for s in items)
    if weighted not in (0, len(items)):
        raise ValueError(f"{weighted} of {len(items)} samples have a loss_weight: give every sample one, or none")
    longest = max(len(s) for s in items)
    if longest > max(length_buckets):
        raise ValueError(f"a sample has {longest} tokens, more than the largest length bucket {max(length_buckets)}")
    length = bucket(longest, length_buckets)

    rows: list[list[int]] = []  # sample indices per row
    free: list[int] = []  # tokens left per row
    row_role: list[int] = []
    order = sorted(range(len(items)), key=lambda i: -len(items[i]))
    for i in order:
        n, role = len(items[i]), items[i].role
        target = next((r for r in range(len(rows)) if pack and row_role[r] == role and free[r] >= n), None)
        if target is None:
            rows.append([])
            free.append(length)
            row_role.append(role)
            target = len(rows) - 1
        rows[target].append(i)
        free[target] -= n
    rows = [sorted(r) for r in rows]
    order_rows = sorted(range(len(rows)), key=lambda r: rows[r][0])  # keep input order roughly
    num_rows = bucket(len(rows), batch_buckets)

    out = dict(
        tokens=np.full((num_rows, length), pad_id, np.int32),
        positions=np.zeros((num_rows, length), np.int32),
        segment_ids=np.zeros((num_rows, length), np.int32),
        loss_mask=np.zeros((num_rows, length), np.float32),
        sampler_logprobs=np.zeros((num_rows, length), np.float32),
        advantages=np.zeros((num_rows, length), np.float32),
        sample_ids=np.full((num_rows, length), -1, np.int32),
    )
    if weighted:
        out["loss_weights"] = np.zeros((num_rows, length), np.float32)
    roles = np.full((num_rows,), -1, np.int32)
    for row, r in enumerate(order_rows):
        roles[row] = row_role[r]
        col = 0
        for seg, i in enumerate(rows[r], start=1):
            arrays = _sample_arrays(items[i], i)
            n = arrays["tokens"].shape[0]
            sl = slice(col, col + n)
            for name, arr in arrays.items():
                out[name][row, sl] = arr
            out["positions"][row, sl] = np.arange(n)
            out["segment_ids"][row, sl] = seg
            out["sample_ids"][row, sl] = i
            col += n
    return TrainBatch(roles=roles, **out)


def unpack_per_token(batch: TrainBatch, values: Any, num_samples: int) -> list[np.ndarray]:
    """Splits a per-token array [N, L] back into one array per input sample (its completion+prompt tokens)."""
    values, ids = np.asarray(values), np.asarray(batch.sample_ids)
    return [values[ids == i] for i in range(num_samples)]
