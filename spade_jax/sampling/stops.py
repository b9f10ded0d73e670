"""Stop conditions: stop tokens and token sequences checked on device, stop strings checked on host text.

A stop string is usually produced by its canonical tokenization, which the compiled loop matches on device
(the row stops on that very step). Any other tokenization is caught on the host between compiled chunks,
by decoding a short tail window of each row; the completion is then cut right after the stop string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_STOP_IDS = 16
MAX_STOP_SEQS = 8
MAX_STOP_SEQ_LEN = 16


@dataclass(frozen=True)
class StopSpec:
    """Device arrays describing the stop tokens and stop token sequences of one call."""

    ids: np.ndarray  # int32 [MAX_STOP_IDS], -1 padded
    seqs: np.ndarray  # int32 [MAX_STOP_SEQS, MAX_STOP_SEQ_LEN], right-aligned, -2 filled
    used: np.ndarray  # bool, same shape as seqs


def build_stop_spec(
    tokenizer, stop_token_ids: Sequence[int], stop_strings: Sequence[str], *, eos: bool = True
) -> StopSpec:
    """Collects eos ids + extra stop ids, and the canonical token sequence of each stop string.

    Strings whose tokenization is longer than MAX_STOP_SEQ_LEN, or beyond MAX_STOP_SEQS, are left to the host
    check (they still stop generation, up to one chunk later).
    """
    ids = list(dict.fromkeys([*(getattr(tokenizer, "eos_ids", ()) if eos else ()), *stop_token_ids]))
    seqs: list[list[int]] = []
    for s in stop_strings:
        toks = tokenizer.encode(s, add_special_tokens=False)
        if 0 < len(toks) <= MAX_STOP_SEQ_LEN and len(seqs) < MAX_STOP_SEQS:
            seqs.append(toks)
    if len(ids) > MAX_STOP_IDS:
        raise ValueError(f"{len(ids)} stop token ids (eos included); at most {MAX_STOP_IDS} are supported")
    id_arr = np.full((MAX_STOP_IDS,), -1, np.int32)
    id_arr[: len(ids)] = ids
    seq_arr = np.full((MAX_STOP_SEQS, MAX_STOP_SEQ_LEN), -2, np.int32)
    used = np.zeros((MAX_STOP_SEQS, MAX_STOP_SEQ_LEN), bool)
    for j, toks in enumerate(seqs):
        seq_arr[j, MAX_STOP_SEQ_LEN - len(toks) :] = toks
        used[j, MAX_STOP_SEQ_LEN - len(toks) :] = True
    return StopSpec(id_arr, seq_arr, used)


def first_stop(text: str, stop_strings: Sequence[str]) -> tuple[int, str] | None:
    """(end offset, stop string) of the stop string occurrence that ends first in text, or None."""
    best: tuple[int, str] | None = None
    for s in stop_strings:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best[0]):
            best = (i + len(s), s)
    return best


def tail_has_stop(tokenizer, tokens: Sequence[int], n_before: int, stop_strings: Sequence[str]) -> bool:
    """Whether a stop string ends within the tokens added after the first n_before (decodes a short window)."""
    if not stop_strings or len(tokens) <= n_before:
        return False
    back = 4 * max(len(s) for s in stop_strings) + 2  # a character may span several byte-level tokens
    window = tokenizer.decode(tokens[max(0, n_before - back) :])
    return first_stop(window, stop_strings) is not None


def trim_at_stop(tokenizer, tokens: list[int], stop_strings: Sequence[str]) -> tuple[list[int], str, str] | None:
    """If a stop string occurs in decode(tokens): (shortest token prefix whose text contains it, the text cut
    right after it, the stop string). None when no stop string occurs."""
    text = tokenizer.decode(tokens)
    hit = first_stop(text, stop_strings)
    if hit is None:
        return None
    end, s = hit
    n = len(tokens)
    while n > 1:  # the stop usually sits in the last few tokens: walk back until it disappears
        t = tokenizer.decode(tokens[: n - 1])
        h = first_stop(t, stop_strings)
        if h is None or h[0] != end:
            break
        n -= 1
    return tokens[:n], text[:end], s
