# expect: novelty
# reason: duplicate of archived env 'nim_duel'
# A renamed copy of the nim_duel seed (names, messages and constants changed).
"""A pebble-taking duel: whoever removes the final pebble is the winner."""

from functools import reduce

from spade_jax.envs.base import GameEnv


class StonePiles(GameEnv):
    KIND = "game"
    SKILL = "strategic planning"
    NAME = "pebble_piles"
    ACTION_EXAMPLE = "\\boxed{2 3}"

    def setup(self) -> str:
        while True:
            self.piles = [self.rng.randint(1, 8) for _ in range(self.rng.randint(3, 4))]
            if reduce(lambda a, b: a ^ b, self.piles) != 0 and sum(self.piles) >= 8:
                break
        return (
            "Stones game: there are piles of pebbles. On your turn rechoice 1 or more pebbles from ONE pile; then I "
            "choice. Whoever takes the LAST pebble wins. Reply with the pile number and how many to take, "
            f"e.g. \\boxed{{2 3}} takes 3 from pile 2.\nHeaps: {self.render()}"
        )

    def render(self) -> str:
        return "  ".join(f"pile {i + 1}: {h}" for i, h in enumerate(self.piles))

    def decode(self, command: str):
        parts = command.replace(",", " ").split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        pile, count = int(parts[0]) - 1, int(parts[1])
        if not 0 <= pile < len(self.piles) or not 1 <= count <= self.piles[pile]:
            return None
        return pile, count

    def best_choice(self):
        x = reduce(lambda a, b: a ^ b, self.piles)
        for i, h in enumerate(self.piles):
            if x and h ^ x < h:
                return i, h - (h ^ x)
        return None

    def play(self, command: str):
        choice = self.decode(command)
        if choice is None:
            return f"Invalid choice. Send pile number and count, e.g. \\boxed{{1 2}}.\nHeaps: {self.render()}"
        self.piles[choice[0]] -= choice[1]
        if sum(self.piles) == 0:
            return self.win("You took the last pebble. Victory!")
        answer = self.best_choice()
        if answer is None:
            i = self.rng.choice([i for i, h in enumerate(self.piles) if h > 0])
            answer = (i, self.rng.randint(1, min(2, self.piles[i])))
        self.piles[answer[0]] -= answer[1]
        said = f"I take {answer[1]} from pile {answer[0] + 1}."
        if sum(self.piles) == 0:
            return self.lose(f"{said} I took the last pebble. Defeat.")
        return f"{said}\nHeaps: {self.render()}"

    def hint(self) -> str:
        return (
            "Write pile sizes in binary. After each of your choices, the XOR (nim-sum) of all pile sizes "
            "should be 0; then the opponent can never win."
        )

    def reference_action(self) -> str:
        choice = self.best_choice() or (next(i for i, h in enumerate(self.piles) if h), 1)
        return self.boxed(f"{choice[0] + 1} {choice[1]}")

    def random_action(self, rng) -> str:
        i = rng.randrange(len(self.piles))
        return self.boxed(f"{i + 1} {rng.randint(1, max(1, self.piles[i]))}")
