"""The seams between the parts of a run, as small Protocols: what the self-play half needs of a sampler, a
tokenizer, a sandbox pool and its sessions, and a grounding corpus. The real ones are `sampling.Sampler`,
`model.tokenizer.Tokenizer`, `sandbox.host_pool.HostPool` / `EnvSession` and `selfplay.corpus.Corpus`; tests and
benchmarks pass anything with the same methods. Standard library only: the sandbox side imports nothing of
the model's, and these are only types (nothing here checks at run time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["CallOutcome", "EnvPool", "EnvSessionLike", "GroundingCorpus", "SamplerLike", "TokenizerLike"]


class CallOutcome(Protocol):
    """One call into a sandboxed environment (`sandbox.host_pool.CallResult`): a value, or a structured failure."""

    ok: bool
    value: Any
    error: str | None
    message: str


class EnvSessionLike(Protocol):
    """One environment loaded in one sandbox worker, held until `close()`."""

    def reset(self, seed: int | None = None) -> CallOutcome: ...
    def step(self, action: str) -> CallOutcome: ...
    def hint(self) -> CallOutcome: ...
    def close(self) -> None: ...


class EnvPool(Protocol):
    """Sandbox workers that load environment programs (`sandbox.host_pool.HostPool`): `num_workers` sandboxes,
    `capacity` sessions in flight at most (num_workers x sessions per worker); open() blocks beyond it."""

    num_workers: int
    capacity: int

    def open(self, source: str, *, env_kwargs: dict | None = None) -> EnvSessionLike: ...
    def close(self) -> None: ...


class TokenizerLike(Protocol):
    """Text <-> token ids and the chat template (`model.tokenizer.Tokenizer`)."""

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...
    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> str: ...
    # Untrusted text (observations, hints, sources) is text: never a special token (see model/tokenizer.py).
    def encode_chat(self, messages: list[dict], tools: Any = None, **kwargs: Any) -> list[int]: ...
    def encode_spans(self, spans: Sequence[tuple[str, bool]]) -> list[int]: ...
    def encode_text(self, text: str) -> list[int]: ...


class SamplerLike(Protocol):
    """Batched generation from token ids (`sampling.Sampler`); completions carry ids, log-probs and text."""

    max_total_len: int

    def generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]: ...


class GroundingCorpus(Protocol):
    """Documents the designer grounds its environments in, in a resumable order (`selfplay.corpus.Corpus`)."""

    def next(self) -> Any: ...
    def get_state(self) -> dict: ...
    def set_state(self, state: dict) -> None: ...
