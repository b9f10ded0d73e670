"""Optimization: pack the most valuable set of items into a bag with a weight limit."""

import itertools

from spade_jax.envs.base import GameEnv


class KnapsackPick(GameEnv):
    KIND = "game"
    SKILL = "optimization"
    NAME = "knapsack_pick"
    ACTION_EXAMPLE = "\\boxed{add 2}"
    ITEMS = 6
    MAX_WEIGHT = 9

    def setup(self) -> str:
        n = self.ITEMS
        self.items = [(self.rng.randint(2, self.MAX_WEIGHT), self.rng.randint(3, 20)) for _ in range(n)]
        self.capacity = sum(w for w, _ in self.items) // 2
        self.best_value, self.best = max(
            (sum(self.items[i][1] for i in s), s)
            for k in range(n + 1)
            for s in itertools.combinations(range(n), k)
            if sum(self.items[i][0] for i in s) <= self.capacity
        )
        self.bag: set[int] = set()
        listing = ", ".join(f"{i + 1}: weight {w} value {v}" for i, (w, v) in enumerate(self.items))
        return (
            f"Pack a bag with weight limit {self.capacity} to get the MAXIMUM total value. Items: {listing}. "
            "Commands: \\boxed{add 2}, \\boxed{remove 2}, \\boxed{done}. When you say done you win only if "
            "your bag's value is the best possible; otherwise you lose."
        )

    def status(self) -> str:
        w = sum(self.items[i][0] for i in self.bag)
        v = sum(self.items[i][1] for i in self.bag)
        return f"Bag: {sorted(i + 1 for i in self.bag) or 'empty'}, weight {w}/{self.capacity}, value {v}."

    def play(self, command: str):
        parts = command.lower().split()
        if parts == ["done"]:
            value = sum(self.items[i][1] for i in self.bag)
            if value == self.best_value:
                return self.win(f"Value {value} is optimal. You win!")
            return self.lose(f"Value {value}; the best was {self.best_value}. You lose.")
        if len(parts) != 2 or parts[0] not in ("add", "remove") or not parts[1].isdigit():
            return "Invalid: use \\boxed{add N}, \\boxed{remove N} or \\boxed{done}."
        i = int(parts[1]) - 1
        if not 0 <= i < len(self.items):
            return f"Invalid item number; items are 1-{len(self.items)}."
        if parts[0] == "add":
            if i in self.bag:
                return f"Item {i + 1} is already in the bag. {self.status()}"
            if sum(self.items[j][0] for j in self.bag) + self.items[i][0] > self.capacity:
                return f"Too heavy: item {i + 1} does not fit. {self.status()}"
            self.bag.add(i)
        else:
            self.bag.discard(i)
        return self.status()

    def hint(self) -> str:
        return (
            "Greedy by value per weight can fail here. Compare the few combinations that nearly fill the "
            f"bag; the best bag uses {len(self.best)} items."
        )

    def reference_action(self) -> str:
        extra = sorted(self.bag - set(self.best))
        if extra:
            return self.boxed(f"remove {extra[0] + 1}")
        missing = sorted(set(self.best) - self.bag)
        return self.boxed(f"add {missing[0] + 1}" if missing else "done")

    def random_action(self, rng) -> str:
        k = rng.randrange(2 * len(self.items) + 1)
        if k == 2 * len(self.items):
            return self.boxed("done")
        return self.boxed(f"{'add' if k % 2 == 0 else 'remove'} {k // 2 + 1}")
