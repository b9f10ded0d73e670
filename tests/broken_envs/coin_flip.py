# expect: random_play
# reason: random play wins
from spade_jax.envs.base import GameEnv


class CoinFlip(GameEnv):
    KIND = "game"
    SKILL = "causal inference"
    NAME = "coin_flip"

    def setup(self) -> str:
        self.side = self.rng.choice(["heads", "tails"])
        return "I flipped a coin. Call it: \\boxed{heads} or \\boxed{tails}."

    def play(self, command: str):
        if command.lower() not in ("heads", "tails"):
            return "Say heads or tails."
        return self.win() if command.lower() == self.side else self.lose(f"It was {self.side}.")

    def random_action(self, rng) -> str:
        return self.boxed(rng.choice(["heads", "tails"]))
