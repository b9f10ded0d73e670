"""Agent policies for the rollout engine: what one turn asks (`TurnRequest`) and answers (`TurnReply`).

`ModelPolicy` samples every live episode's reply in one `sampler.generate` call (token-in, token-out);
`ScriptedPolicy` wraps a Python function, so tests, baselines and benchmarks can replace the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from spade_jax import streams

if TYPE_CHECKING:
    from spade_jax.selfplay.rollouts import EpisodeSpec

__all__ = ["ModelPolicy", "Policy", "ScriptedPolicy", "TurnReply", "TurnRequest"]


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


class ModelPolicy:
    """The language model as the agent: one `sampler.generate` call per group of equal budgets."""

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

    def act(self, requests: list[TurnRequest]) -> list[TurnReply]:
        from spade_jax.sampling import SamplingParams

        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.max_new_tokens, r.stop_strings), []).append(i)
        out: list[TurnReply | None] = [None] * len(requests)
        for (max_new, stops), idx in groups.items():
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
            completions = self.sampler.generate([requests[i].prompt_ids for i in idx], params)
            for i, c in zip(idx, completions):
                out[i] = TurnReply(
                    text=c.text,
                    token_ids=[int(t) for t in c.token_ids],
                    logprobs=[float(x) for x in c.logprobs],
                    raw_logprobs=[float(x) for x in getattr(c, "raw_logprobs", c.logprobs)],
                    finish_reason=c.finish_reason,
                )
        return out  # type: ignore[return-value]


class ScriptedPolicy:
    """A policy written in Python: `fn(request) -> reply text` (for tests, baselines and benchmarks)."""

    def __init__(self, fn: Callable[[TurnRequest], str]):
        self.fn = fn

    def act(self, requests: list[TurnRequest]) -> list[TurnReply]:
        return [TurnReply(text=self.fn(r)) for r in requests]
