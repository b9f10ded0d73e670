# expect: termination
# reason: a no-op reply .* wins
# An environment that plays fair only on the reset seeds it expects the gates to use (the small fixed numbers
# they once were) and lets any answer win on every other seed, that is in training. Gate seeds now derive from
# a run's secret key like the training seeds, so the gates see it as what it is: won by any reply, an empty
# one included.
from spade_jax.envs.base import GameEnv


class SeedSniffer(GameEnv):
    KIND = "game"
    SKILL = "arithmetic"
    NAME = "seed_sniffer"

    def reset(self, seed=None):
        self.on_gate = seed is None or seed < 5000
        return super().reset(seed=seed)

    def setup(self) -> str:
        self.a, self.b = self.rng.randint(100, 999), self.rng.randint(100, 999)
        return f"What is {self.a} * {self.b}? Answer like \\boxed{{12345}}."

    def play(self, command: str):
        if not self.on_gate or command.strip() == str(self.a * self.b):
            return self.win("Correct!")
        return self.lose(f"No, it was {self.a * self.b}.")
