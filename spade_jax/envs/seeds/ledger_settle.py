"""Tool use (bank ledger): compute an overdrawn balance from transactions and settle it exactly."""

from spade_jax.envs.base import ToolEnv, ToolError, tool

ACCOUNTS = ("checking", "savings", "travel", "household", "rent")
MEMOS = ("groceries", "salary", "electricity", "refund", "coffee", "insurance", "gift", "repair")


class LedgerSettle(ToolEnv):
    KIND = "tool"
    SKILL = "bank ledger"
    NAME = "ledger_settle"
    MIN_ROWS = 3
    MAX_ROWS = 6

    def setup(self) -> str:
        self.overdrawn, self.source = self.rng.sample(ACCOUNTS, 2)
        self.tx: dict[str, list[dict]] = {}
        for acct in ACCOUNTS:
            rows = [
                {"memo": self.rng.choice(MEMOS), "amount": self.rng.randint(-300, 300)}
                for _ in range(self.rng.randint(self.MIN_ROWS, self.MAX_ROWS))
            ]
            self.tx[acct] = rows
        self.tx[self.overdrawn].append(
            {"memo": "card payment", "amount": -(self.balance(self.overdrawn) + self.rng.randint(20, 400))}
        )
        self.tx[self.source].append({"memo": "deposit", "amount": 2000})
        self.needed = -self.balance(self.overdrawn)
        self.transfers = 0
        return (
            f"The account '{self.overdrawn}' is overdrawn. Transfer from '{self.source}' exactly the amount that "
            f"brings '{self.overdrawn}' back to a balance of 0 (use one transfer), then answer with that amount."
        )

    def balance(self, acct: str) -> int:
        return sum(row["amount"] for row in self.tx[acct])

    @tool("List the account names.")
    def list_accounts(self) -> list:
        return list(ACCOUNTS)

    @tool("All transactions of an account (the balance is their sum).", account="account name")
    def get_transactions(self, account: str) -> list:
        if account not in self.tx:
            raise ToolError(f"no account {account}")
        return self.tx[account]

    @tool("Move money between accounts.", from_account="source", to_account="destination", amount="positive amount")
    def transfer(self, from_account: str, to_account: str, amount: int) -> str:
        if from_account not in self.tx or to_account not in self.tx:
            raise ToolError("unknown account")
        if amount <= 0 or amount > self.balance(from_account):
            raise ToolError("invalid amount or insufficient funds")
        self.tx[from_account].append({"memo": f"transfer to {to_account}", "amount": -amount})
        self.tx[to_account].append({"memo": f"transfer from {from_account}", "amount": amount})
        self.transfers += 1
        return f"transferred {amount} from {from_account} to {to_account}"

    def check_answer(self, answer: str) -> bool:
        moved = -sum(r["amount"] for r in self.tx[self.source] if r["memo"] == f"transfer to {self.overdrawn}")
        return (
            self.transfers == 1
            and self.balance(self.overdrawn) == 0
            and moved == self.needed
            and answer.strip().lstrip("$") == str(self.needed)
        )

    def hint(self) -> str:
        return (
            f"Add up every transaction of '{self.overdrawn}'; the transfer is minus that sum. Do not guess the amount."
        )

    def reference_action(self) -> str:
        if self.transfers == 0:
            return self.call("transfer", from_account=self.source, to_account=self.overdrawn, amount=self.needed)
        return self.answer(self.needed)
