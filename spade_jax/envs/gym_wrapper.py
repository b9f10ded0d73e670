"""Gymnasium view of any TextEnv (in-process): text observation and action spaces, seeded resets."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from spade_jax.envs.base import TextEnv

__all__ = ["CHARSET", "TextGymEnv"]

# Printable ASCII plus whitespace and a few common symbols; other characters are shown as "?".
CHARSET = frozenset(string.printable) | frozenset("—–…→←↑↓·×÷°•✓✗")


class TextGymEnv(gym.Env):
    """`gymnasium.Env` wrapping a TextEnv instance; passes `gymnasium.utils.env_checker.check_env`.

    Observations are clipped to `max_obs_chars` and characters outside CHARSET become "?". A reset
    without a seed draws the episode seed from `self.np_random`, so a seeded run is reproducible.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        env: TextEnv,
        max_obs_chars: int = 8192,
        max_action_chars: int = 4096,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.render_mode = render_mode
        self.max_obs_chars = int(max_obs_chars)
        self.observation_space = spaces.Text(max_length=self.max_obs_chars, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=int(max_action_chars), min_length=0, charset=CHARSET)
        self._last_obs = ""

    def _clean(self, obs: str) -> str:
        obs = "".join(c if c in CHARSET else "?" for c in obs)
        if len(obs) > self.max_obs_chars:
            obs = obs[: self.max_obs_chars - 3] + "..."
        self._last_obs = obs
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        obs, info = self.env.reset(seed=episode_seed)
        return self._clean(obs), dict(info, episode_seed=episode_seed)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(str(action))
        return self._clean(obs), float(reward), bool(terminated), bool(truncated), dict(info)

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" else None
