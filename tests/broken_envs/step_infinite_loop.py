# expect: step
# reason: timed out
from spade_jax.envs.base import GameEnv


class Collatz(GameEnv):
    NAME = "collatz"

    def setup(self) -> str:
        self.secret = self.rng.randint(2, 50)
        return "Guess how many Collatz steps my number takes to reach 1, e.g. \\boxed{10}."

    def steps_from(self, n: int) -> int:
        count = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            count += 1
        return count

    def play(self, command: str):
        value = int(command) if command.lstrip("-").isdigit() else 0
        if self.steps_from(value) == self.steps_from(self.secret):  # loops forever for value <= 0
            return self.win()
        return self.lose()
