"""Spatial reasoning: locate a hidden submarine on a grid from the distances your sonar pings report."""

from spade_jax.envs.base import GameEnv

ROWS = "ABCDEFGHI"


class SonarHunt(GameEnv):
    KIND = "game"
    SKILL = "spatial reasoning"
    NAME = "sonar_hunt"
    ACTION_EXAMPLE = "\\boxed{C5}"
    GRID = 8
    PINGS = 4

    def setup(self) -> str:
        self.sub = (self.rng.randrange(self.GRID), self.rng.randrange(self.GRID))
        self.pings: list[tuple[tuple[int, int], int]] = []
        self.left = self.PINGS
        return (
            f"A submarine hides on a {self.GRID}x{self.GRID} grid: rows A-{ROWS[self.GRID - 1]} (top to bottom), "
            f"columns 1-{self.GRID} (left to right). Each turn ping one cell. If the submarine is there you win; "
            "otherwise I report its distance in steps (rows apart + columns apart). "
            f"You have {self.PINGS} pings. Reply with a cell, e.g. \\boxed{{C3}}."
        )

    def play(self, command: str):
        cell = command.strip().upper().replace(" ", "")
        if len(cell) != 2 or cell[0] not in ROWS[: self.GRID] or not "1" <= cell[1] <= str(self.GRID):
            return f"Invalid cell: use a row letter A-{ROWS[self.GRID - 1]} and a column 1-{self.GRID}."
        r, c = ROWS.index(cell[0]), int(cell[1]) - 1
        self.left -= 1
        if (r, c) == self.sub:
            return self.win(f"Direct hit at {cell}! You win.")
        dist = abs(r - self.sub[0]) + abs(c - self.sub[1])
        self.pings.append(((r, c), dist))
        if self.left == 0:
            return self.lose(f"{cell}: distance {dist}. Out of pings; it was at {self.name(self.sub)}. You lose.")
        return f"{cell}: the submarine is {dist} steps away. {self.left} pings left."

    @staticmethod
    def name(cell: tuple[int, int]) -> str:
        return f"{ROWS[cell[0]]}{cell[1] + 1}"

    def hint(self) -> str:
        return (
            "Ping two corners first. Each distance limits the submarine to a diagonal line; two lines from "
            "different corners cross in exactly one cell."
        )

    def reference_action(self) -> str:
        # Honest play: ping corners A1 and A8, then the only cell consistent with both distances.
        probes = [(0, 0), (0, self.GRID - 1)]
        if len(self.pings) < 2:
            return self.boxed(self.name(probes[len(self.pings)]))
        for r in range(self.GRID):
            for c in range(self.GRID):
                if all(abs(r - pr) + abs(c - pc) == d for (pr, pc), d in self.pings):
                    return self.boxed(self.name((r, c)))
        return self.boxed("A1")

    def random_action(self, rng) -> str:
        return self.boxed(f"{rng.choice(ROWS[: self.GRID])}{rng.randint(1, self.GRID)}")
