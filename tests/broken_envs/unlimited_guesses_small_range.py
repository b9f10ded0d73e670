# expect: random_play
# reason: random play wins
from spade_jax.envs.base import GameEnv


class SmallRange(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "small_range"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 6)
        return "Guess my die roll (1-6), as many times as you like, e.g. \\boxed{3}."

    def play(self, command: str):
        if command == str(self.secret):
            return self.win()
        return "No."

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, 6))
