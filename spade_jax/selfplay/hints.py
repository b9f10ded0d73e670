"""Privileged hints for the hinted plays: written by the model from the environment's source (the paper's and
the default; temperature 0.3, 1-3 sentences under 100 words, the approach and never the answer), or the
environment's own `hint()` where the config allows it. Model hints for many environments are written in one
batched sampler call.

Failure handling: `HintWriter.write` never raises. Each item gets a `HintResult` whose `hint` is the clean
hint or None with a one-word `reason`: "empty" (nothing left after cleaning), "cut" (max_new_tokens reached
inside an unfinished <think> block, or nothing left after cleaning a cut completion), "error" (the sampler
raised; every item of the call). No hint means no regret measurement, never an unhinted "hinted" play.
Whether a hint gives away the answer is checked per episode inside the sandbox (see rollouts.py).
"""

from __future__ import annotations

import ast
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spade_jax.config.selfplay import HintConfig
from spade_jax.infra.hosts import Hosts
from spade_jax.interfaces import SamplerLike, TokenizerLike

__all__ = ["HINT_REASONS", "HintResult", "HintWriter", "clean_hint", "defines_hint", "hint_messages", "inject_hint"]

log = logging.getLogger(__name__)
HINT_REASONS = ("ok", "empty", "cut", "error")

_GAME_PROMPT = """You are given the Python source of a text environment that an agent will play. The agent sees \
only the text observations, never this code. Write a hint that will be appended to the agent's first \
observation.

The hint must explain the APPROACH or strategy that wins this specific environment, and the exact reply format \
it expects. Do not reveal the answer, secret values or code internals. Use 1-3 sentences, under 100 words. \
Reply with the hint text only."""

_TOOL_PROMPT = """You are given the Python source of a multi-turn tool-use environment. The agent sees only the \
task text and the tool results, never this code, and calls tools with <tool_call>{...}</tool_call> before \
finishing with <answer>...</answer>. Write a hint that will be appended to the agent's first observation.

Describe the plan in terms of which kinds of tools to use in which order, and say to read each tool result \
before acting. Never write concrete ids, names, amounts or answers from the code: the agent must discover \
them. Use 1-3 sentences, under 100 words. Reply with the hint text only."""

_LABEL_RE = re.compile(r"^\s*(?:\*\*)?(?:hint|answer|response)(?:\*\*)?\s*[:\-]\s*", re.I)
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")


def defines_hint(source: str) -> bool:
    """True when some class in the source defines a `hint` method (read with `ast`, never executed)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == "hint":
                    return True
    return False


def clean_hint(text: str, max_words: int = 100, max_sentences: int = 3) -> str:
    """The hint as the agent sees it: think blocks, code fences, labels and quotes removed, cut to 3 sentences
    and `max_words` words."""
    text = re.sub(r"<think>.*?(</think>|$)", " ", text or "", flags=re.S)
    text = re.sub(r"```.*?(```|$)", " ", text, flags=re.S)
    text = _LABEL_RE.sub("", text.strip())
    text = " ".join(text.split()).strip().strip('"').strip("'").strip()
    sentences = [s for s in _SENTENCE_RE.split(text) if s.strip()]
    text = " ".join(sentences[:max_sentences])
    words = text.split()
    if len(words) > max_words:
        text = " ".join(words[:max_words]).rstrip(",;:") + "..."
    return text


def inject_hint(observation: str, hint: str | None, template: str = "{observation}\n\nHINT: {hint}") -> str:
    """First observation with the hint appended (unchanged when there is no hint)."""
    if not hint:
        return observation
    return template.format(observation=observation, hint=hint)


def hint_messages(source: str, kind: str = "game") -> list[dict]:
    """Chat messages asking the model for a hint about `source`."""
    system = _TOOL_PROMPT if kind == "tool" else _GAME_PROMPT
    user = f"Environment source:\n```python\n{source.strip()}\n```\n\nWrite the hint now."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class HintResult:
    """One written hint: `hint` (clean text, or None), `reason` (one of HINT_REASONS; "ok" iff hint is set) and
    the sampler's `completion` (None when sampling failed)."""

    hint: str | None
    reason: str
    completion: Any = None

    @property
    def ok(self) -> bool:
        return self.hint is not None


def judge_completion(text: str, finish_reason: str, config: HintConfig, *, in_think: bool = False) -> HintResult:
    """The clean hint of one completion, or None and why ("cut" / "empty"). `in_think`: the prompt itself
    opened a <think> block (thinking chat templates), so the completion starts inside it."""
    text = ("<think>" if in_think else "") + (text or "")
    cut = finish_reason in ("length", "context")
    opened = text.rfind("<think>")
    if cut and opened >= 0 and "</think>" not in text[opened:]:
        return HintResult(None, "cut")
    hint = clean_hint(text, config.max_words, config.max_sentences)
    if not hint:
        return HintResult(None, "cut" if cut else "empty")
    return HintResult(hint, "ok")


class HintWriter:
    """Writes hints with the policy itself, batched; keeps the prompt within the context budget.

    `counts` accumulates the reasons of every item written (see `stats()`)."""

    def __init__(self, sampler: SamplerLike | None, tokenizer: TokenizerLike, config: HintConfig = HintConfig(), *,
                 context_len: int = 4096):  # fmt: skip
        self.sampler, self.tokenizer, self.config = sampler, tokenizer, config
        self.context_len = context_len
        self.counts: Counter = Counter()

    def stats(self) -> dict[str, float]:
        """Counters since construction: `hints/written` (usable), `hints/empty`, `hints/cut`, `hints/error`."""
        return {f"hints/{'written' if r == 'ok' else r}": float(self.counts[r]) for r in HINT_REASONS}

    def _prompt_ids(self, source: str, kind: str) -> list[int]:
        budget = self.context_len - self.config.max_new_tokens
        text = source
        for _ in range(8):
            ids = self.tokenizer.encode_chat(  # the source is text: its special-token spellings stay text
                hint_messages(text, kind), enable_thinking=bool(self.config.enable_thinking)
            )
            if len(ids) <= budget:
                return ids
            text = text[: int(len(text) * budget / len(ids) * 0.9)]  # keep the head (setup, rules) of the code
        return ids[-budget:]

    def write(self, items: Sequence[tuple[str, str]], *, seed: int = 0, hosts: Hosts = Hosts()) -> list[HintResult]:
        """Hints for (source, kind) items in ONE sampler call per host (each host writes its block, every host
        gets them all), in order; never raises (see the module doc)."""
        results = hosts.map(items, lambda block: self._write(block, hosts.seed(seed)))
        self.counts.update(r.reason for r in results)
        return results

    def _write(self, items: Sequence[tuple[str, str]], seed: int) -> list[HintResult]:
        """`write` on this host's items."""
        try:
            completions = self._generate(items, seed)
            if len(completions) != len(items):
                raise ValueError(f"{len(completions)} completions for {len(items)} prompts")
            results = [judge_completion(c.text, c.finish_reason, self.config, in_think=self._opens_think(c.prompt_ids))
                       for c in completions]  # fmt: skip
            results = [HintResult(r.hint, r.reason, c) for r, c in zip(results, completions)]
        except Exception as e:  # a failed call costs the hints (no regret measured), never the run
            log.warning("hint writing failed for %d environments: %s", len(items), e)
            results = [HintResult(None, "error") for _ in items]
        return results

    def _opens_think(self, prompt_ids: Sequence[int]) -> bool:
        """True when the prompt ends inside an open <think> block (a thinking template's generation prompt)."""
        try:
            tail = self.tokenizer.decode(list(prompt_ids)[-16:])
        except Exception:
            return False
        return isinstance(tail, str) and tail.rfind("<think>") > tail.rfind("</think>")

    def _generate(self, items: Sequence[tuple[str, str]], seed: int) -> list:
        from spade_jax.sampling import SamplingParams

        prompts = [self._prompt_ids(src, kind) for src, kind in items]
        params = SamplingParams(
            max_new_tokens=self.config.max_new_tokens,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            top_k=self.config.top_k,
            stop_token_ids=tuple(getattr(self.tokenizer, "eos_ids", ()) or ()),
            seed=seed,
        )
        return list(self.sampler.generate(prompts, params))
