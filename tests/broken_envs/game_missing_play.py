# expect: static
# reason: does not define play\(\)
from spade_jax.envs.base import GameEnv


class Lazy(GameEnv):
    KIND = "game"
    SKILL = "memory recall"
    NAME = "lazy"

    def setup(self) -> str:
        self.cards = [self.rng.randint(1, 9) for _ in range(6)]
        return "Remember the cards: " + " ".join(map(str, self.cards))

    def hint(self) -> str:
        return "Write the cards down."
