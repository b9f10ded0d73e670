"""Stand-ins for the model in tests of the self-play cycle: a designer that replays given programs and a
scripted higher/lower player. Everything around them (sandboxes, gates, hints, rewards) is real."""

from __future__ import annotations

import random
import re
from pathlib import Path

from spade_jax.envs.base import extract_boxed


class ReplayDesigner:
    """Writes the given programs in turn, one per prompt, forever; learner updates are no-ops."""

    def __init__(self, tokenizer, sources: list[str] | tuple[str, ...], max_total_len: int = 4096):
        self.tok, self.sources, self.i, self.max_total_len = tokenizer, list(sources), 0, max_total_len

    def generate(self, prompts, params):
        from spade_jax.sampling import Completion

        out = []
        for p in prompts:
            text = "```python\n" + self.sources[self.i % len(self.sources)] + "```\n"
            self.i += 1
            ids = self.tok.encode(text, add_special_tokens=False)
            out.append(Completion(list(p), ids, [-0.5] * len(ids), [-0.5] * len(ids), text, "eos"))
        return out

    def update_model(self, model) -> None:
        pass


def bisect_or_guess(req, always: bool = False) -> str:
    """Higher/lower: binary search when hinted (or `always`), a guess seeded by the reset seed otherwise."""
    lo, hi, last = 1, 100, None
    for msg in req.messages[1:]:
        if msg["role"] == "assistant":
            last = int(extract_boxed(msg["content"]) or 0)
        elif "go higher" in msg["content"]:
            lo = last + 1
        elif "go lower" in msg["content"]:
            hi = last - 1
    if always or "HINT:" in req.messages[0]["content"]:
        return f"\\boxed{{{(lo + hi) // 2}}}"
    return f"\\boxed{{{random.Random(req.spec.seed * 31 + req.turn).randint(lo, hi)}}}"


# A fixed-pool environment a random tiny model wins about half the time (reward spread without learning).
COIN_ENV = '''
from spade_jax.envs.base import GameEnv


class ParityGame(GameEnv):
    """Win when the reply has an even number of characters and no box: a coin flip for a tiny model's random
    text, while a boxed reply (what the self-play audit's no-op and random plays send) always loses."""

    KIND = "game"
    SKILL = "pattern recognition"
    NAME = "parity"

    def setup(self) -> str:
        return "Reply with \\\\boxed{word}. You win if the word has an even number of letters."

    def handle(self, action: str):  # judged on the raw reply: a random tiny model rarely writes \\boxed{}
        won = len(action) % 2 == 0 and "boxed" not in action
        return ("You win." if won else "You lose."), (1.0 if won else 0.0), True
'''


def expectation(path: Path) -> tuple[str, str]:
    """(gate or "valid", reason substring or regex) from a test program's `# expect:` / `# reason:` header."""
    text = path.read_text(encoding="utf-8")
    gate = re.search(r"^# expect: (\w+)$", text, re.M)
    reason = re.search(r"^# reason: (.+)$", text, re.M)
    assert gate and reason, f"{path.name} lacks its '# expect:' / '# reason:' header"
    return gate.group(1), reason.group(1)
