"""Memory recall: a concentration game; flipped cards are shown once, then hidden again."""

from spade_jax.envs.base import GameEnv

PAIRS = 6


class MemoryPairs(GameEnv):
    KIND = "game"
    SKILL = "memory recall"
    NAME = "memory_pairs"
    ACTION_EXAMPLE = "\\boxed{3 8}"
    TURNS = 14

    def setup(self) -> str:
        self.cards = list("ABCDEFGHIJ"[:PAIRS] * 2)
        self.rng.shuffle(self.cards)
        self.matched: set[int] = set()
        self.seen: dict[int, str] = {}
        self.flips_left = self.TURNS
        return (
            f"Memory game: {2 * PAIRS} face-down cards numbered 1-{2 * PAIRS} hide {PAIRS} pairs of letters. "
            "Each turn flip two cards; a matching pair stays found, otherwise both are hidden again (I show "
            f"them only once, so remember them). Find all pairs within {self.TURNS} turns to win. "
            "Reply with two card numbers, e.g. \\boxed{3 8}."
        )

    def play(self, command: str):
        parts = command.replace(",", " ").replace("and", " ").split()
        try:
            a, b = (int(p) - 1 for p in parts)
        except ValueError:
            return "Invalid: send two card numbers, e.g. \\boxed{1 2}."
        hidden = [i for i in range(2 * PAIRS) if i not in self.matched]
        if a == b or a not in hidden or b not in hidden:
            return f"Invalid: pick two different unfound cards from: {' '.join(str(i + 1) for i in hidden)}."
        self.flips_left -= 1
        self.seen[a], self.seen[b] = self.cards[a], self.cards[b]
        if self.cards[a] == self.cards[b]:
            self.matched |= {a, b}
            msg = f"Card {a + 1} is {self.cards[a]}, card {b + 1} is {self.cards[b]}: a pair!"
            if len(self.matched) == 2 * PAIRS:
                return self.win(f"{msg} All pairs found. You win!")
        else:
            msg = f"Card {a + 1} is {self.cards[a]}, card {b + 1} is {self.cards[b]}: no match."
        if self.flips_left == 0:
            return self.lose(f"{msg} Out of turns. You lose.")
        left = " ".join(str(i + 1) for i in range(2 * PAIRS) if i not in self.matched)
        return f"{msg} Unfound cards: {left}. {self.flips_left} turns left."

    def hint(self) -> str:
        return (
            "Keep a written list of every card you have seen and its letter. Flip an unseen card first; "
            "if its letter was seen before, flip that remembered card next."
        )

    def reference_action(self) -> str:
        for i in range(2 * PAIRS):
            if i not in self.matched:
                j = next(k for k in range(2 * PAIRS) if k != i and self.cards[k] == self.cards[i])
                return self.boxed(f"{i + 1} {j + 1}")
        return self.boxed("1 2")

    def random_action(self, rng) -> str:
        a, b = rng.sample(range(1, 2 * PAIRS + 1), 2)
        return self.boxed(f"{a} {b}")
