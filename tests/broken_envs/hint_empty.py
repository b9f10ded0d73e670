# expect: hint
# reason: hint\(\) returned an empty string
from spade_jax.envs.base import GameEnv


class BlankHint(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "blank_hint"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        self.left = 8
        return "Guess my number from 1 to 200 in 8 tries; I say higher or lower. Example: \\boxed{100}."

    def play(self, command: str):
        if not command.isdigit():
            return "Send a whole number, e.g. \\boxed{100}."
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose(f"It was {self.secret}.")
        return "higher" if guess < self.secret else "lower"

    def hint(self) -> str:
        return "   "
