# expect: reset
# reason: IndexError.*\(line 11\)
from spade_jax.envs.base import GameEnv


class EmptyDeck(GameEnv):
    NAME = "empty_deck"

    def setup(self) -> str:
        deck = [c for c in range(1, 53) if c > 52]
        self.card = self.rng.choice(deck)
        return "Guess my card from 1 to 52, e.g. \\boxed{12}."

    def play(self, command: str):
        return self.win() if command == str(self.card) else self.lose()
