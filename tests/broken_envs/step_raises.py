# expect: step
# reason: ValueError
from spade_jax.envs.base import GameEnv


class Trusting(GameEnv):
    NAME = "trusting"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        self.left = 8
        return "Guess a number from 1 to 200 in 8 tries, e.g. \\boxed{100}."

    def play(self, command: str):
        guess = int(command)  # crashes on anything that is not a number
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose()
        return "higher" if guess < self.secret else "lower"
