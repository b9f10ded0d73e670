"""How the agent meets an environment, defined once for training and evaluation: the system prompt, the wrapper
around a game's first observation, and what of a reply the environment's step() receives.

`AgentPrompt.of(rollout_config)` is what self-play plays with (`RolloutConfig.system_prompt`,
`observation_template`, `action_parsing`); `eval --pool` plays with the same object, so a pool's win rate and the
training plays' are measured on one footing. The paper presets wrap a game's first observation in the reference's
`qwen3_game` text and pass step() the reference's parse of the reply (`\\boxed{x}`); the defaults do neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from spade_jax.config.selfplay import RolloutConfig
from spade_jax.envs.base import canonical_action

__all__ = ["AgentPrompt", "wrap_observation"]


def wrap_observation(observation: str, template: str | None, kind: str = "game") -> str:
    """A game's first observation in `template` (RolloutConfig.observation_template); tool episodes and
    template None keep it as is (the reference wraps game observations only)."""
    if not template or kind == "tool":
        return observation
    return template.format(observation=observation)


@dataclass(frozen=True)
class AgentPrompt:
    """The agent's side of the environment interface (see the module doc)."""

    system: str | None = None
    observation_template: str | None = None
    action_parsing: str = "raw"

    @classmethod
    def of(cls, config: RolloutConfig) -> AgentPrompt:
        return cls(config.system_prompt, config.observation_template, config.action_parsing)

    def first_messages(self, observation: str, kind: str = "game") -> list[dict]:
        """The conversation an episode starts with: the system prompt (if any) and the first observation,
        wrapped for games (a hint, when there is one, is already in `observation`)."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": wrap_observation(observation, self.observation_template, kind)}]

    def action(self, reply: str, kind: str = "game") -> str:
        """What step() receives for a reply: the reply, or (action_parsing "reference", games) the reference's
        parse of it; a thinking model's reasoning (up to the last `</think>`) is never part of the action."""
        reply = reply.rsplit("</think>", 1)[-1].strip() if "</think>" in reply else reply
        if self.action_parsing == "reference" and kind != "tool":
            return canonical_action(reply)
        return reply
