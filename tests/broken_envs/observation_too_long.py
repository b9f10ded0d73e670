# expect: reset
# reason: observation is \d+ chars
from spade_jax.envs.base import GameEnv


class Encyclopedia(GameEnv):
    KIND = "game"
    SKILL = "memory recall"
    NAME = "encyclopedia"

    def setup(self) -> str:
        self.facts = [f"Fact {i}: item {i} weighs {self.rng.randint(1, 999)} grams." for i in range(1000)]
        self.q = self.rng.randrange(1000)
        return "\n".join(self.facts) + f"\nHow much does item {self.q} weigh? Answer like \\boxed{{12}}."

    def play(self, command: str):
        weight = self.facts[self.q].split()[-2]
        return self.win() if command == weight else self.lose()
