"""Pool suite (`--suite pool=DIR` or `--pool DIR`): the model plays every environment of a pool directory, in the
sandbox, without hints; win rate overall and per environment.

The directory is read by `spade_jax.envs.pools.load_pool`: a flat directory of either contract's files, or the
layout of the paper's released pool and of `spade-jax export-envs` (checksums verified). Each environment is
played `plays` times on held-out seeds (the training pools draw small seeds); the episode outcome is the
training rule (`envs.outcome`: terminal reward, a win at >= 0.999). The agent meets each environment as in
training: the same `AgentPrompt` (selfplay/agent_prompt.py: system prompt, observation wrapper, action parsing),
by default that of the default rollout config, or a run's (`AgentPrompt.of(cfg.selfplay.rollout)`), so a pool's
win rate and the training plays' are comparable. A session that fails to load, or a call that fails, ends that
play as a loss with its reason kept; it never ends the evaluation.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from spade_jax.config.selfplay import RolloutConfig
from spade_jax.envs.outcome import episode_outcome
from spade_jax.envs.source import EnvSource
from spade_jax.eval.core import EvalContext, ItemResult, SuiteResult
from spade_jax.eval.metrics import mean
from spade_jax.selfplay.agent_prompt import AgentPrompt

__all__ = ["PoolSuite"]

EVAL_SEED = 8_000_000


@dataclass
class _Play:
    env: EnvSource
    seed: int
    session: Any = None
    messages: list[dict] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    done: bool = False
    error: str | None = None


def _first_message(obs: str, info: dict) -> str:
    tools = info.get("tools") if isinstance(info, dict) else None
    if isinstance(tools, list) and tools and "<tool_call>" not in obs:
        return f"{obs}\n\nTools:\n{json.dumps(tools, indent=1)[:6000]}"
    return obs


class PoolSuite:
    """Win rate over (environment, seed) items of a pool directory, `plays` per environment."""

    name = "pool"
    main_metric = "win_rate"

    def __init__(self, path: str, *, plays: int = 2, max_turns: int = 10, prompt: AgentPrompt | None = None):
        from spade_jax.envs.pools import load_pool

        self.path, self.plays, self.max_turns = path, int(plays), int(max_turns)
        self.prompt = prompt or AgentPrompt.of(RolloutConfig())
        self.envs = load_pool(path)  # a bad directory is one ValueError line, before any model is loaded

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        items = [{"id": f"{e.name}#{k}", "env": e, "seed": EVAL_SEED + seed * 1000 + k}
                 for k in range(self.plays) for e in self.envs]  # fmt: skip
        return items if limit is None else items[:limit]

    def _start(self, runner: Any, play: _Play) -> None:
        try:
            play.session = runner.open(play.env.source, env_kwargs={"max_turns": self.max_turns})
            load = getattr(play.session, "load_result", None)
            if load is not None and not load.ok:
                raise RuntimeError(f"load failed: {load.error}: {load.message}")
            reset = play.session.reset(play.seed)
            if not reset.ok:
                raise RuntimeError(f"reset failed: {reset.error}: {reset.message}")
            obs, info = reset.value
            play.messages = self.prompt.first_messages(_first_message(str(obs), info), play.env.kind)
        except Exception as e:  # the environment's fault: a lost play, never the end of the evaluation
            play.done, play.error = True, " ".join(str(e).split())[:300]

    def _step(self, play: _Play, reply: str) -> None:
        play.messages.append({"role": "assistant", "content": reply})
        result = play.session.step(self.prompt.action(reply, play.env.kind))
        if not result.ok:
            play.done, play.error = True, f"step failed: {result.error}: {result.message}"[:300]
            return
        obs, reward, terminated, truncated, _info = result.value
        play.rewards.append(reward if isinstance(reward, int | float) else 0.0)
        play.terminated = bool(terminated)
        if terminated or truncated or len(play.rewards) >= self.max_turns:
            play.done = True
        else:
            play.messages.append({"role": "user", "content": str(obs)})

    def run(self, model: Any, items: list[dict], ctx: EvalContext) -> SuiteResult:
        start = time.perf_counter()
        runner = ctx.runner
        width = max(1, int(getattr(runner, "capacity", 4)))  # each open session holds one sandbox worker
        plays = [_Play(it["env"], it["seed"]) for it in items]
        rounds = 0
        for lo in range(0, len(plays), width):
            chunk = plays[lo : lo + width]
            for play in chunk:
                self._start(runner, play)
            while live := [p for p in chunk if not p.done]:
                rounds += 1
                replies = model.chat([p.messages for p in live], max_new_tokens=ctx.max_new_tokens,
                                     seed=ctx.seed + rounds)  # fmt: skip
                for play, reply in zip(live, replies):
                    self._step(play, reply.text)
            for play in chunk:
                if play.session is not None:
                    play.session.close()
            ctx.tick(self.name, min(lo + width, len(plays)), len(plays))
        results = []
        for p in plays:
            ret, won = episode_outcome(p.rewards, p.terminated)
            results.append(ItemResult(f"{p.env.name}#{p.seed}", [won], prediction=len(p.rewards),
                                      reference=p.env.name, error=p.error, extra={"return": ret}))  # fmt: skip
        metrics = {"win_rate": mean([r.score for r in results]),
                   "mean_return": mean([r.extra["return"] for r in results])}  # fmt: skip
        for env in self.envs:
            mine = [r.score for r, p in zip(results, plays) if p.env is env]
            if mine:
                metrics[f"win_rate/{env.name}"] = mean(mine)
        if any(p.error for p in plays):
            metrics["errors"] = float(sum(1 for p in plays if p.error))
        return SuiteResult(self.name, results, metrics, time.perf_counter() - start)
