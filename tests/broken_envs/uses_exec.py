# expect: static
# reason: 'exec'
from spade_jax.envs.base import GameEnv


class Interpreter(GameEnv):
    NAME = "interpreter"

    def setup(self) -> str:
        self.target = self.rng.randint(10, 99)
        return f"Write Python that sets x to {self.target}, e.g. \\boxed{{x = 5}}."

    def play(self, command: str):
        scope = {}
        exec(command, scope)
        return self.win() if scope.get("x") == self.target else self.lose()
