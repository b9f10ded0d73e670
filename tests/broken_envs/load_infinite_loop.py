# expect: load
# reason: timed out
from spade_jax.envs.base import GameEnv

PRIMES = []
n = 2
while len(PRIMES) < 10:
    if all(n % p for p in PRIMES):
        PRIMES.append(n)
    # bug: n is never incremented, so the loop never ends


class Primes(GameEnv):
    NAME = "primes"

    def setup(self) -> str:
        self.secret = self.rng.choice(PRIMES)
        return "Guess one of the first ten primes, e.g. \\boxed{7}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
