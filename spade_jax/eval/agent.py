"""The model as the evaluation suites see it: batched chat in, reply texts out.

`ChatModel` wraps a `Sampler` (greedy by default, so a score is reproducible; temperature sampling when a suite
asks for k > 1 samples); conversations that do not fit the sampler's context get an empty reply with
finish reason "context" instead of failing the batch. `ScriptedModel` answers with a Python function (tests,
ground-truth baselines).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ChatModel", "EvalModel", "Reply", "ScriptedModel", "load_chat_model"]


@dataclass
class Reply:
    """One generated reply."""

    text: str
    finish_reason: str = "eos"
    tokens: int = 0


class EvalModel(Protocol):
    """Anything that answers a batch of chat conversations."""

    name: str

    def chat(
        self,
        conversations: Sequence[Sequence[dict]],
        *,
        max_new_tokens: int,
        stop_strings: Sequence[str] = (),
        temperature: float | None = None,
        seed: int = 0,
    ) -> list[Reply]: ...


class ChatModel:
    """A `Sampler` behind the `EvalModel` interface; `batch_size` rows per generate call, sorted by length."""

    def __init__(self, sampler: Any, *, name: str = "model", temperature: float = 0.0, batch_size: int = 16):
        self.sampler, self.name = sampler, name
        self.temperature, self.batch_size = float(temperature), int(batch_size)
        self.generated_tokens = 0

    def chat(
        self,
        conversations: Sequence[Sequence[dict]],
        *,
        max_new_tokens: int,
        stop_strings: Sequence[str] = (),
        temperature: float | None = None,
        seed: int = 0,
    ) -> list[Reply]:
        from spade_jax.sampling import SamplingParams

        temp = self.temperature if temperature is None else float(temperature)
        prompts = [self.sampler.render_chat(list(c)) for c in conversations]
        limit = int(getattr(self.sampler, "max_total_len", 1 << 30))
        out: list[Reply | None] = [None] * len(prompts)
        todo = []
        for i, ids in enumerate(prompts):
            if len(ids) + 1 > limit:
                out[i] = Reply("", "context", 0)
            else:
                todo.append(i)
        todo.sort(key=lambda i: len(prompts[i]))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            longest = max(len(prompts[i]) for i in chunk)
            params = SamplingParams(
                max_new_tokens=max(1, min(int(max_new_tokens), limit - longest)),
                temperature=temp,
                greedy=temp <= 0.0,
                stop_strings=tuple(stop_strings),
                seed=seed * 1_000_003 + start,
            )
            for i, c in zip(chunk, self.sampler.generate([prompts[i] for i in chunk], params)):
                out[i] = Reply(c.text, c.finish_reason, len(c.token_ids))
                self.generated_tokens += len(c.token_ids)
        return out  # type: ignore[return-value]


class ScriptedModel:
    """Answers each conversation with `fn(messages) -> text` (for tests and reference baselines)."""

    def __init__(self, fn: Callable[[list[dict]], str], name: str = "scripted"):
        self.fn, self.name = fn, name
        self.calls = 0

    def chat(self, conversations, *, max_new_tokens: int, stop_strings=(), temperature=None, seed: int = 0):
        self.calls += 1
        return [Reply(self.fn(list(c))) for c in conversations]


def load_chat_model(spec: str, *, max_total_len: int = 4096, batch_size: int = 16) -> ChatModel:
    """Loads a model spec (preset, GGUF, HF dir) with `load_model` and wraps it in a greedy `ChatModel`."""
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler

    _cfg, model, tokenizer = load_model(spec)
    sampler = Sampler(model, tokenizer, max_total_len=max_total_len)
    return ChatModel(sampler, name=spec, batch_size=batch_size)
