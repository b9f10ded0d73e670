# expect: load
# reason: KeyError
from spade_jax.envs.base import GameEnv


class Configured(GameEnv):
    NAME = "configured"

    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns, **kwargs)
        self.size = kwargs["board_size"]

    def setup(self) -> str:
        self.secret = self.rng.randint(1, self.size)
        return "Guess a number, e.g. \\boxed{1}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
