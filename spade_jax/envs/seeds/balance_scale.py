"""Logical deduction: find the one counterfeit coin (heavier or lighter) with a few weighings on a balance."""

from spade_jax.envs.base import GameEnv


class BalanceScale(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "balance_scale"
    ACTION_EXAMPLE = "\\boxed{weigh 1 2 vs 3 4}"
    COINS = 12
    WEIGHINGS = 3

    def setup(self) -> str:
        self.fake = self.rng.randint(1, self.COINS)
        self.heavy = self.rng.random() < 0.5
        self.weighings_left = self.WEIGHINGS
        return (
            f"{self.COINS} coins are numbered 1-{self.COINS}. One is fake: it is either heavier or lighter than "
            f"the others. You may use the balance {self.WEIGHINGS} times, then you must name the fake coin and "
            "whether it is heavy or light (one answer only; a wrong answer loses).\n"
            "Commands: \\boxed{weigh 1 2 vs 3 4} or \\boxed{answer 5 heavy}."
        )

    def play(self, command: str):
        words = command.lower().replace(",", " ").split()
        if len(words) == 3 and words[0] == "answer" and words[1].isdigit() and words[2] in ("heavy", "light"):
            if int(words[1]) == self.fake and (words[2] == "heavy") == self.heavy:
                return self.win("Correct! You found the fake coin.")
            kind = "heavy" if self.heavy else "light"
            return self.lose(f"Wrong. The fake was coin {self.fake} ({kind}). You lose.")
        if not words or words[0] != "weigh" or "vs" not in words:
            return "Invalid: use \\boxed{weigh 1 2 vs 3 4} or \\boxed{answer 5 light}."
        cut = words.index("vs")
        try:
            left, right = [int(w) for w in words[1:cut]], [int(w) for w in words[cut + 1 :]]
        except ValueError:
            return f"Invalid: coins are numbers 1-{self.COINS}, e.g. \\boxed{{weigh 1 2 vs 3 4}}."
        coins = left + right
        in_range = all(1 <= c <= self.COINS for c in coins)
        if not left or len(left) != len(right) or len(set(coins)) != len(coins) or not in_range:
            return f"Invalid weighing: put the same number of distinct coins (1-{self.COINS}) on each side."
        if self.weighings_left == 0:
            return "No weighings left. Answer now, e.g. \\boxed{answer 5 heavy}."
        self.weighings_left -= 1
        delta = (self.fake in left) - (self.fake in right)
        delta = delta if self.heavy else -delta
        result = (
            "the left side is heavier" if delta > 0 else "the right side is heavier" if delta < 0 else "they balance"
        )
        sides = f"{' '.join(map(str, left))} vs {' '.join(map(str, right))}"
        return f"{sides}: {result}. {self.weighings_left} weighings left."

    def hint(self) -> str:
        return (
            "Split the coins into three equal groups and weigh two of them. Each weighing has three "
            "outcomes, so plan each one to divide the remaining possibilities (coin and heavy/light) by three."
        )

    def reference_action(self) -> str:
        return self.boxed(f"answer {self.fake} {'heavy' if self.heavy else 'light'}")

    def random_action(self, rng) -> str:
        if rng.random() < 0.25:
            return self.boxed(f"answer {rng.randint(1, self.COINS)} {rng.choice(['heavy', 'light'])}")
        coins = rng.sample(range(1, self.COINS + 1), 2 * rng.randint(1, self.COINS // 2))
        half = len(coins) // 2
        return self.boxed(f"weigh {' '.join(map(str, coins[:half]))} vs {' '.join(map(str, coins[half:]))}")
