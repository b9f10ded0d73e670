"""Lights Out with textarena's LightsOut-v0 rules (5x5 grid, 20 turns, a press toggles the cell and its
four neighbours, win when all lights are off); our own code."""

from spade_jax.envs.base import GameEnv


class LightsOut(GameEnv):
    KIND = "game"
    SKILL = "spatial reasoning"
    NAME = "ta_lights_out"
    ACTION_EXAMPLE = "\\boxed{2 3}"
    SIZE = 5
    TURNS = 20

    def setup(self) -> str:
        n = self.SIZE
        self.grid = [[0] * n for _ in range(n)]
        self.solution = set()
        while not self.solution:
            for _ in range(self.rng.randint(3, 6)):
                cell = (self.rng.randrange(n), self.rng.randrange(n))
                self.solution ^= {cell}
        for r, c in self.solution:
            self.toggle(r, c)
        self.left = self.TURNS
        return (
            f"Lights Out on a {n}x{n} grid (1 = on). Pressing a cell toggles it and its up/down/left/right "
            f"neighbours. Turn every light off within {self.TURNS} presses. Reply with row and column (0-based) "
            "in a box, e.g. \\boxed{2 3}.\n" + self.board()
        )

    def toggle(self, r: int, c: int) -> None:
        for dr, dc in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)):
            rr, cc = r + dr, c + dc
            if 0 <= rr < self.SIZE and 0 <= cc < self.SIZE:
                self.grid[rr][cc] ^= 1

    def board(self) -> str:
        return "\n".join(" ".join(map(str, row)) for row in self.grid)

    def play(self, command: str):
        parts = command.replace(",", " ").split()
        if len(parts) != 2 or not all(p.isdigit() and int(p) < self.SIZE for p in parts):
            return f"Invalid: give row and column from 0 to {self.SIZE - 1}, e.g. \\boxed{{2 3}}."
        r, c = int(parts[0]), int(parts[1])
        self.toggle(r, c)
        self.solution ^= {(r, c)}
        self.left -= 1
        if not any(any(row) for row in self.grid):
            return self.win("All lights are off. You win!")
        if self.left == 0:
            return self.lose("Out of presses. You lose.\n" + self.board())
        return f"{self.left} presses left.\n" + self.board()

    def reference_action(self) -> str:
        r, c = min(self.solution)
        return self.boxed(f"{r} {c}")

    def random_action(self, rng) -> str:
        return self.boxed(f"{rng.randrange(self.SIZE)} {rng.randrange(self.SIZE)}")

    def hint(self) -> str:
        return "Pressing a cell twice undoes it; chase lights downward row by row, pressing below each lit cell."
