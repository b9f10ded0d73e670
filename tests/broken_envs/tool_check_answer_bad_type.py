# expect: step
# reason: check_answer\(\) must return bool
from spade_jax.envs.base import ToolEnv, tool


class Ledger(ToolEnv):
    KIND = "tool"
    SKILL = "bank ledger"
    NAME = "ledger"

    def setup(self) -> str:
        self.balances = {f"acct{i}": self.rng.randint(10, 500) for i in range(6)}
        self.target = self.rng.choice(sorted(self.balances))
        return f"What is the balance of {self.target}? Look it up and answer with the number."

    @tool("Get the balance of an account.", account="account id such as acct3")
    def balance(self, account: str) -> int:
        return self.balances[account]

    def check_answer(self, answer: str):
        return "correct" if answer.strip() == str(self.balances[self.target]) else "wrong"
