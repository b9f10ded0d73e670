# expect: hint
# reason: hint\(\) is too long
from spade_jax.envs.base import GameEnv


class Verbose(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "verbose"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        self.lo, self.hi, self.left = 1, 200, 8
        return "Guess my number from 1 to 200 in 8 tries; I say higher or lower. Example: \\boxed{100}."

    def play(self, command: str):
        if not command.isdigit():
            return "Send a whole number, e.g. \\boxed{100}."
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if guess < self.secret:
            self.lo = max(self.lo, guess + 1)
        else:
            self.hi = min(self.hi, guess - 1)
        if self.left == 0:
            return self.lose(f"It was {self.secret}.")
        return "higher" if guess < self.secret else "lower"

    def hint(self) -> str:
        words = ["Think", "carefully", "about", "halving", "the", "range", "every", "single", "time"]
        return " ".join(words * 20)

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, 200))
