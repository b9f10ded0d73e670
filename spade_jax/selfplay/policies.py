"""Agent policies for the rollout engine: what one turn asks (`TurnRequest`) and answers (`TurnReply`).

Two ways to answer. `act(requests)` answers a batch at once (`ScriptedPolicy` wraps a Python function, so
tests, baselines and benchmarks can replace the model). A streaming policy (`StreamingPolicy`) takes requests
with `submit` and returns replies as they finish, one engine step per `poll`: `ModelPolicy` puts each request
on the sampler's continuous-batching engine (token-in, token-out), so an episode's reply never waits for
another's. `as_stream` gives any policy the streaming form (an `act` policy answers at its next poll).

Seeds: request n of a ModelPolicy (counted over its life, `calls`, checkpointed by the self-play loop) samples
from `streams.derive(seed, "agent", n)`, so a run is reproduced exactly when requests are submitted in the same
order (the rollout engine submits in episode order at fixed points).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from spade_jax import streams

if TYPE_CHECKING:
    from spade_jax.selfplay.episodes import EpisodeSpec

__all__ = ["ModelPolicy", "Policy", "ScriptedPolicy", "StreamingPolicy", "TurnReply", "TurnRequest", "as_stream"]


@dataclass
class TurnRequest:
    """What the policy sees for one live episode this turn."""

    index: int
    prompt_ids: list[int]
    messages: list[dict]
    max_new_tokens: int
    stop_strings: tuple[str, ...]
    spec: EpisodeSpec
    hint: str | None
    turn: int
    tools: list[dict] | None = None  # tool schemas the chat template renders (None: tools are in the text)


@dataclass
class TurnReply:
    """The policy's reply; token ids/log-probs may be None for scripted policies (then the text is encoded)."""

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    raw_logprobs: list[float] | None = None
    finish_reason: str = "eos"


class Policy(Protocol):
    """Anything that answers a batch of turn requests."""

    def act(self, requests: list[TurnRequest]) -> list[TurnReply]: ...


class StreamingPolicy(Protocol):
    """A policy that answers requests as they finish (see module doc)."""

    def submit(self, requests: list[TurnRequest]) -> None: ...
    def poll(self, expect: int = 0) -> list[tuple[TurnRequest, TurnReply]]: ...
    def cancel(self) -> None: ...
    @property
    def pending(self) -> int: ...


def _reply(c: Any) -> TurnReply:
    return TurnReply(
        text=c.text,
        token_ids=[int(t) for t in c.token_ids],
        logprobs=[float(x) for x in c.logprobs],
        raw_logprobs=[float(x) for x in getattr(c, "raw_logprobs", c.logprobs)],
        finish_reason=c.finish_reason,
    )


class ModelPolicy:
    """The language model as the agent, on the sampler's engine (streaming) or in batches (`act`)."""

    def __init__(
        self,
        sampler: Any,
        tokenizer: Any,
        *,
        temperature: float = 0.6,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
    ):
        self.sampler, self.tokenizer = sampler, tokenizer
        self.temperature, self.top_p, self.top_k, self.seed = temperature, top_p, top_k, seed
        self.calls = 0
        self._inflight: list[Any] = []

    def _params(self, max_new: int, stops: tuple[str, ...]) -> Any:
        from spade_jax.sampling import SamplingParams

        params = SamplingParams(
            max_new_tokens=max_new,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop_token_ids=tuple(getattr(self.tokenizer, "eos_ids", ()) or ()),
            stop_strings=stops,
            seed=streams.derive(self.seed, "agent", self.calls),
        )
        self.calls += 1
        return params

    def act(self, requests: list[TurnRequest]) -> list[TurnReply]:
        """All requests at once: one `sampler.generate` call per group of equal budgets and stops."""
        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.max_new_tokens, r.stop_strings), []).append(i)
        out: list[TurnReply | None] = [None] * len(requests)
        for (max_new, stops), idx in groups.items():
            completions = self.sampler.generate([requests[i].prompt_ids for i in idx], self._params(max_new, stops))
            for i, c in zip(idx, completions):
                out[i] = _reply(c)
        return out  # type: ignore[return-value]

    @property
    def can_stream(self) -> bool:
        """Whether the sampler takes requests one by one (a stand-in with only `generate` does not)."""
        return callable(getattr(self.sampler, "submit", None))

    def submit(self, requests: list[TurnRequest]) -> None:
        """Puts each request on the sampler's engine, in order (request n draws from seed stream n)."""
        for r in requests:
            params = self._params(r.max_new_tokens, r.stop_strings)
            self._inflight.append(self.sampler.submit(r.prompt_ids, params, tag=r))

    def poll(self, expect: int = 0) -> list[tuple[TurnRequest, TurnReply]]:
        """One engine step: the requests that finished, in submission order (handed back early: an episode's
        next turn follows each reply)."""
        if self._inflight:
            self.sampler.step(expect=expect, eager=True)
        done = [q for q in self._inflight if q.done]
        self._inflight = [q for q in self._inflight if not q.done]
        return [(q.tag, _reply(q.completion)) for q in done]

    def cancel(self) -> None:
        """Drops every request still on the engine (after a failure) and, once none runs, what the engine kept
        for reuse (`Sampler.forget`): called when a rollout ends, so the next one starts from a clean engine."""
        if self._inflight:
            self.sampler.cancel(self._inflight)
        self._inflight = []
        forget = getattr(self.sampler, "forget", None)
        if callable(forget):
            forget()

    @property
    def pending(self) -> int:
        return len(self._inflight)


class ScriptedPolicy:
    """A policy written in Python: `fn(request) -> reply text` (for tests, baselines and benchmarks)."""

    def __init__(self, fn: Callable[[TurnRequest], str]):
        self.fn = fn

    def act(self, requests: list[TurnRequest]) -> list[TurnReply]:
        return [TurnReply(text=self.fn(r)) for r in requests]


class _Immediate:
    """The streaming form of an `act` policy: what was submitted is answered at the next poll, in one call."""

    def __init__(self, policy: Policy):
        self.policy, self._queued = policy, []

    def submit(self, requests: list[TurnRequest]) -> None:
        self._queued += requests

    def poll(self, expect: int = 0) -> list[tuple[TurnRequest, TurnReply]]:
        batch, self._queued = self._queued, []
        return list(zip(batch, self.policy.act(batch))) if batch else []

    def cancel(self) -> None:
        self._queued = []

    @property
    def pending(self) -> int:
        return len(self._queued)


def as_stream(policy: Any) -> StreamingPolicy:
    """The policy itself when it streams (and its sampler can), else its `act` answered at each poll."""
    if callable(getattr(policy, "submit", None)) and getattr(policy, "can_stream", True):
        return policy
    return _Immediate(policy)
