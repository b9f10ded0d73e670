"""One generation request of the decode engine (`Request`: prompt, settings, budget, stops, random key) and the
`Completion` it ends with.

The tokens a request generates come back chunk by chunk (`Request.absorb`); when its row finishes, `finish`
builds the Completion: eos / stop token (kept in token_ids, left out of the text), a stop string (checked on the
host too, the text cut right after it), the token budget ("length") or the context ("context").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from spade_jax.sampling import decode as dec
from spade_jax.sampling import stops
from spade_jax.sampling.types import Completion, SamplingParams

_REASONS = {
    dec.EOS: "eos",
    dec.STOP_SEQ: "stop_string",
    dec.HOST_STOP: "stop_string",
    dec.LENGTH: "length",
    dec.CONTEXT: "context",
}


def key_data(seed: int, index: int) -> np.ndarray:
    """The PRNG key data of stream `index` of `seed` (a request's own random stream)."""
    return np.asarray(jax.random.key_data(jax.random.fold_in(jax.random.key(seed), index)))


@dataclass(eq=False)
class Request:
    """A prompt the engine is asked to continue, and what it generated so far (see module doc).

    `prompt` fits the context (`budget` >= 1 new tokens; `budget_code` says whether the budget came from
    max_new_tokens, LENGTH, or the context, CONTEXT); `truncated` prompt tokens were dropped from its start;
    `tag` is the owner's, untouched.
    """

    prompt: list[int]
    params: SamplingParams
    budget: int
    budget_code: int
    key: np.ndarray
    stop: stops.StopSpec
    truncated: int = 0
    tag: Any = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)
    completion: Completion | None = None

    @property
    def done(self) -> bool:
        return self.completion is not None

    def absorb(self, tokens: np.ndarray, logprobs: np.ndarray, raws: np.ndarray, k: int) -> None:
        """Appends the first k tokens of a chunk's row."""
        self.tokens += tokens[:k].tolist()
        self.logprobs += logprobs[:k].tolist()
        self.raw_logprobs += raws[:k].tolist()

    def finish(self, tokenizer: Any, code: int) -> Completion:
        """Builds (and keeps) the Completion for finish code `code`."""
        toks, lps, raws, params = self.tokens, self.logprobs, self.raw_logprobs, self.params
        reason = _REASONS.get(code, "length")
        stop = None
        text_ids = toks
        if reason == "eos" and toks:
            stop = tokenizer.decode(toks[-1:])
            text_ids = toks[:-1]  # the eos / stop token itself is not part of the text
        text = tokenizer.decode(text_ids)
        extra: dict = {"stop_check": "device"} if code == dec.STOP_SEQ else {}
        if params.stop_strings:
            cut = stops.trim_at_stop(tokenizer, text_ids, params.stop_strings)
            if cut is not None:
                kept, text, stop = cut
                if len(kept) < len(toks) or code != dec.STOP_SEQ:
                    extra = {"stop_check": "host"}
                toks, lps, raws = toks[: len(kept)], lps[: len(kept)], raws[: len(kept)]
                reason = "stop_string"
        if self.truncated:
            extra["truncated_prompt_tokens"] = self.truncated
        self.completion = Completion(
            prompt_ids=list(self.prompt),
            token_ids=list(toks),
            logprobs=list(lps),
            raw_logprobs=list(raws),
            text=text,
            finish_reason=reason,
            stop=stop,
            extra=extra,
        )
        return self.completion
