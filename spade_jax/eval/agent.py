"""The model as the evaluation suites see it: batched chat in, reply texts out.

`ChatModel` wraps a `Sampler` (greedy by default, so a score is reproducible; temperature sampling when a suite
asks for k > 1 samples); conversations that do not fit the sampler's context get an empty reply with
finish reason "context" instead of failing the batch. `tools` (one schema list per conversation, or None) go to
the chat template (`tools=`); `supports_tools` says whether the template renders them and `role: "tool"`
messages (callers fall back to a textual tool list when it does not). `ScriptedModel` answers with a Python
function (tests, ground-truth baselines).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from spade_jax import streams

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
    supports_tools: bool

    def chat(
        self,
        conversations: Sequence[Sequence[dict]],
        *,
        max_new_tokens: int,
        stop_strings: Sequence[str] = (),
        temperature: float | None = None,
        seed: int = 0,
        tools: Sequence[Sequence[dict] | None] | None = None,
    ) -> list[Reply]: ...


class ChatModel:
    """A `Sampler` behind the `EvalModel` interface; `batch_size` rows per generate call, sorted by length."""

    def __init__(self, sampler: Any, *, name: str = "model", temperature: float = 0.0, batch_size: int = 16):
        self.sampler, self.name = sampler, name
        self.temperature, self.batch_size = float(temperature), int(batch_size)
        self.generated_tokens = 0

    @property
    def supports_tools(self) -> bool:
        """True when the sampler's chat template renders `tools=` and `role: "tool"` messages."""
        probe = getattr(self.sampler.tokenizer, "supports_tools", None)
        return bool(probe()) if callable(probe) else False

    def chat(
        self,
        conversations: Sequence[Sequence[dict]],
        *,
        max_new_tokens: int,
        stop_strings: Sequence[str] = (),
        temperature: float | None = None,
        seed: int = 0,
        tools: Sequence[Sequence[dict] | None] | None = None,
    ) -> list[Reply]:
        from spade_jax.sampling import SamplingParams

        temp = self.temperature if temperature is None else float(temperature)
        if tools is not None and len(tools) != len(conversations):
            raise ValueError(f"{len(tools)} tool lists for {len(conversations)} conversations")
        per = list(tools) if tools is not None else [None] * len(conversations)
        prompts = [self.sampler.render_chat(list(c), tools=list(t) if t else None) for c, t in zip(conversations, per)]
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
                seed=streams.derive(seed, "eval", start),
            )
            for i, c in zip(chunk, self.sampler.generate([prompts[i] for i in chunk], params)):
                out[i] = Reply(c.text, c.finish_reason, len(c.token_ids))
                self.generated_tokens += len(c.token_ids)
        return out  # type: ignore[return-value]


class ScriptedModel:
    """Answers each conversation with `fn(messages) -> text` (for tests and reference baselines); it renders no
    template, so by default callers give it the textual tool list (`supports_tools=True` to test the other)."""

    def __init__(self, fn: Callable[[list[dict]], str], name: str = "scripted", *, supports_tools: bool = False):
        self.fn, self.name, self.supports_tools = fn, name, supports_tools
        self.calls = 0

    def chat(self, conversations, *, max_new_tokens: int, stop_strings=(), temperature=None, seed: int = 0,
             tools=None):  # fmt: skip
        self.calls += 1
        return [Reply(self.fn(list(c))) for c in conversations]


def load_chat_model(spec: str, *, max_total_len: int = 4096, batch_size: int = 16) -> ChatModel:
    """Loads a model spec (preset, GGUF, HF dir) with `load_model` and wraps it in a greedy `ChatModel`."""
    from spade_jax.model.loading import load_model
    from spade_jax.sampling import Sampler

    _cfg, model, tokenizer = load_model(spec)
    sampler = Sampler(model, tokenizer, max_total_len=max_total_len)
    return ChatModel(sampler, name=spec, batch_size=batch_size)
