# expect: termination
# reason: a no-op reply .* wins
from spade_jax.envs.base import GameEnv


class Generous(GameEnv):
    KIND = "game"
    SKILL = "pattern recognition"
    NAME = "generous"

    def setup(self) -> str:
        self.seq = [self.rng.randint(1, 9) * k for k in range(1, 5)]
        return f"What comes next: {self.seq}? Answer like \\boxed{{12}}."

    def play(self, command: str):
        return self.win("Great answer!")  # every answer counts as correct
