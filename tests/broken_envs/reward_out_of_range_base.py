# expect: step
# reason: outside \[-1, 1\]
from spade_jax.envs.base import GameEnv


class PointsGame(GameEnv):
    NAME = "points_game"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        self.left = 8
        return "Guess a number from 1 to 200 in 8 tries, e.g. \\boxed{100}. Each close guess scores points."

    def play(self, command: str):
        if not command.isdigit():
            return "Send a number.", 0.0, False
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose()
        return "Close!" if abs(guess - self.secret) < 50 else "Far.", 10.0 - abs(guess - self.secret) / 10, False
