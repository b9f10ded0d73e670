# expect: static
# reason: declares no tools
from spade_jax.envs.base import ToolEnv


class EmptyShop(ToolEnv):
    KIND = "tool"
    SKILL = "orders database"
    NAME = "empty_shop"

    def setup(self) -> str:
        self.total = self.rng.randint(10, 99)
        return "Find the total of order A1 and answer with it."

    def lookup(self, order_id: str) -> int:
        return self.total

    def check_answer(self, answer: str) -> bool:
        return answer.strip() == str(self.total)
