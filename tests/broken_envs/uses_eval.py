# expect: static
# reason: 'eval'
from spade_jax.envs.base import GameEnv


class Calculator(GameEnv):
    NAME = "calculator"

    def setup(self) -> str:
        self.target = self.rng.randint(10, 99)
        return f"Write an expression with value {self.target} using only the digit 7, e.g. \\boxed{{7*7}}."

    def play(self, command: str):
        if set(command) - set("7+-*/() "):
            return self.lose("Only the digit 7 and + - * / ( ) are allowed.")
        value = eval(command)
        return self.win() if value == self.target else self.lose(f"That is {value}.")
