"""What a generation call asks for (`SamplingParams`) and what it returns per prompt (`Completion`)."""

from __future__ import annotations

from dataclasses import dataclass, field

FINISH_REASONS = ("eos", "stop_string", "length", "context")


@dataclass
class SamplingParams:
    """Decoding settings of a `Sampler.generate` call (every row of the call shares them) or of one request
    (`Sampler.submit`: rows of different settings share the engine's batch).

    temperature <= 0 or greedy=True means argmax decoding. top_k=0 and top_p=1.0 switch those filters off.
    Generation of a row stops at any tokenizer eos id, any of `stop_token_ids`, a stop string, `max_new_tokens`,
    or the sampler's `max_total_len` (prompt + completion), whichever comes first.
    """

    max_new_tokens: int = 256
    temperature: float = 0.6
    top_k: int = 0
    top_p: float = 1.0
    greedy: bool = False
    stop_token_ids: tuple[int, ...] = ()  # in addition to the tokenizer's eos ids
    stop_strings: tuple[str, ...] = ()  # e.g. "</tool_call>", "</answer>"; kept at the end of the completion text
    seed: int = 0
    ignore_eos: bool = False  # benchmarks: generate exactly max_new_tokens (stop ids and strings still apply)

    def __post_init__(self) -> None:
        self.stop_token_ids = tuple(int(t) for t in self.stop_token_ids)
        self.stop_strings = tuple(self.stop_strings)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop_strings must not contain an empty string")

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature <= 0.0

    @property
    def is_filtered(self) -> bool:
        """True when top-k or top-p truncates the distribution."""
        return not self.is_greedy and (self.top_k > 0 or self.top_p < 1.0)


@dataclass
class Completion:
    """One generated continuation.

    token_ids: the sampled tokens (a stop token or the tokens that complete a stop string are included).
    logprobs[i]: log-prob of token_ids[i] under the distribution it was actually drawn from (after temperature,
    top-k, top-p; 0.0 for greedy, a point mass). raw_logprobs[i]: under the raw model (temperature 1, no
    truncation). text: the decoded completion, cut right after the stop string when one ended it.
    finish_reason: "eos" (eos or stop token), "stop_string", "length" (max_new_tokens) or "context"
    (the sampler's max_total_len was reached).
    """

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    text: str
    finish_reason: str
    stop: str | None = None  # the stop string or the decoded stop token that ended generation, if any
    extra: dict = field(default_factory=dict)

    @property
    def mask(self) -> list[int]:
        """1 for every generated token (all returned tokens are sampled, none are padding)."""
        return [1] * len(self.token_ids)

    @property
    def full_ids(self) -> list[int]:
        """prompt_ids + token_ids: the prefix to continue a conversation from."""
        return [*self.prompt_ids, *self.token_ids]
