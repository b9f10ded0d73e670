# expect: step
# reason: ValueError
from spade_jax.envs.base import ReasoningEnv


class Product(ReasoningEnv):
    KIND = "reasoning"
    SKILL = "mathematical reasoning"
    NAME = "product"

    def setup(self) -> str:
        self.a, self.b = self.rng.randint(100, 999), self.rng.randint(100, 999)
        return f"What is {self.a} * {self.b}?"

    def check_answer(self, answer: str) -> bool:
        return int(answer) == self.a * self.b
