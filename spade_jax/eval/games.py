"""Games suite: single-player `textarena` games that run offline, played to the end; win rate and mean reward.

The games are the textarena package's own code (trusted like any installed dependency) and run in this
process; only the model's replies go into them. Each turn the agent sees the new part of the observation and
answers in textarena's format (actions in square brackets). A game still running after `games_max_turns`
replies counts as a loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from spade_jax.envs.outcome import is_win
from spade_jax.eval.core import EvalContext, ItemResult, SuiteResult
from spade_jax.eval.metrics import mean

__all__ = ["GAMES", "GamesSuite", "game_outcome"]

# Single-player, no network, no NLTK corpora, no other model needed (checked by tests/test_eval_games.py).
GAMES = (
    "GuessTheNumber-v0",
    "Mastermind-v0",
    "TowerOfHanoi-v0",
    "LightsOut-v0",
    "FifteenPuzzle-v0",
    "Minesweeper-v0-small",
    "FrozenLake-v0",
    "Sudoku-v0-very-easy",
    "Countdown-v0",
    "Cryptarithm-v0",
    "PegJump-v0",
    "RushHour-v0",
)
SYSTEM_PROMPT = (
    "You are playing a single-player text game. Read the rules and the game state, think briefly, and end "
    "every reply with exactly one action in the format the game asks for (usually in square brackets, e.g. [5])."
)
EVAL_SEED = 7_000_000  # held-out seeds: training pools draw small seeds


def game_outcome(close_value: Any) -> float | None:
    """Player 0's reward from textarena's `env.close()` ((rewards, info) or rewards); None if unfinished."""
    rewards = close_value[0] if isinstance(close_value, tuple) else close_value
    if not isinstance(rewards, dict) or 0 not in rewards or rewards[0] is None:
        return None
    if isinstance(rewards[0], (int, float)):
        return float(rewards[0])
    # Countdown-v0 and Cryptarithm-v0 (textarena 0.7.x) pass reward and reason to set_invalid_move swapped:
    # the reward is a message and the real score sits at the end of info's "reason" ("Invalid Move: 0.568").
    info = close_value[1] if isinstance(close_value, tuple) and len(close_value) > 1 else {}
    reason = str(((info or {}).get(0) or {}).get("reason", ""))
    try:
        return float(reason.rsplit(":", 1)[-1])
    except ValueError:
        return 0.0  # an invalid move with no score: a loss


@dataclass
class _Game:
    game: str
    seed: int
    env: Any = None
    seen: str = ""
    messages: list[dict] = field(default_factory=list)
    turns: int = 0
    reward: float | None = None
    done: bool = False
    error: str | None = None


class GamesSuite:
    """Win rate over (game, seed) items, cycling through `GAMES`."""

    name = "textarena"
    main_metric = "win_rate"

    def __init__(self, games: tuple[str, ...] = GAMES):
        self.games = games

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        n = len(self.games) if limit is None else limit
        return [
            {"id": f"{self.games[i % len(self.games)]}#{i // len(self.games)}", "game": self.games[i % len(self.games)],
             "seed": EVAL_SEED + seed * 1000 + i}
            for i in range(n)
        ]  # fmt: skip

    def _observe(self, g: _Game) -> None:
        _pid, obs = g.env.get_observation()
        obs = obs if isinstance(obs, str) else str(obs)
        new = obs[len(g.seen) :] if obs.startswith(g.seen) else obs
        g.seen = obs
        g.messages.append({"role": "user", "content": new.strip() or "(no change)"})

    def run(self, model: Any, items: list[dict], ctx: EvalContext) -> SuiteResult:
        import textarena as ta

        start = time.perf_counter()
        max_turns = int(ctx.options.get("games_max_turns", 30))
        plays = []
        for it in items:
            g = _Game(it["game"], it["seed"])
            try:
                g.env = ta.make(it["game"])
                g.env.reset(num_players=1, seed=it["seed"])
                g.messages = [{"role": "system", "content": SYSTEM_PROMPT}]
                self._observe(g)
            except Exception as e:
                g.done, g.error = True, f"{type(e).__name__}: {e}"
            plays.append(g)
        rounds = 0
        while True:
            live = [g for g in plays if not g.done]
            ctx.tick(self.name, len(plays) - len(live), len(plays))
            if not live:
                break
            rounds += 1
            replies = model.chat([g.messages for g in live], max_new_tokens=ctx.max_new_tokens, seed=ctx.seed + rounds)
            for g, reply in zip(live, replies):
                g.messages.append({"role": "assistant", "content": reply.text})
                g.turns += 1
                try:
                    done, _info = g.env.step(reply.text[-2000:])
                    if done:
                        g.done, g.reward = True, game_outcome(g.env.close())
                    elif g.turns >= max_turns:
                        g.done, g.reward = True, 0.0
                    else:
                        self._observe(g)
                except Exception as e:  # a game crashing on odd input is a loss, never the end of the run
                    g.done, g.error, g.reward = True, f"{type(e).__name__}: {e}", 0.0
        results = [
            ItemResult(
                f"{g.game}#{g.seed}",
                [g.reward is not None and is_win(g.reward)],
                prediction=g.turns,
                reference=g.game,
                error=g.error,
                extra={"reward": g.reward},
            )  # fmt: skip
            for g in plays
        ]
        rewards = [float(g.reward or 0.0) for g in plays]
        metrics = {
            "win_rate": mean([r.score for r in results]),
            "mean_reward": mean(rewards),
            "turns_mean": mean([float(g.turns) for g in plays]),
        }
        if any(g.error for g in plays):
            metrics["errors"] = float(sum(1 for g in plays if g.error))
        return SuiteResult(self.name, results, metrics, time.perf_counter() - start)
