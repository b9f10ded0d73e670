# expect: load
# reason: (?i)memory
from spade_jax.envs.base import GameEnv

TABLE = [0] * (4 * 10**9)


class BigTable(GameEnv):
    NAME = "big_table"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        return "Guess a number from 1 to 200, e.g. \\boxed{100}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
