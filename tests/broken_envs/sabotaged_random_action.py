# expect: random_play
# reason: random play wins
from spade_jax.envs.base import GameEnv


class Pushover(GameEnv):
    KIND = "game"
    SKILL = "optimization"
    NAME = "pushover"

    def setup(self) -> str:
        self.items = [self.rng.randint(1, 50) for _ in range(5)]
        return f"Pick the largest item of {self.items}, e.g. \\boxed{{7}}."

    def play(self, command: str):
        if command.strip():
            return self.win("Good choice!")  # any non-empty boxed answer wins
        return "Say something in the box."

    def random_action(self, rng) -> str:
        return "I pass."  # never well-formed, so its own random policy never wins
