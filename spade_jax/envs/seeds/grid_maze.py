"""Spatial reasoning: walk through a walled grid to the exit with almost no spare moves."""

from collections import deque

from spade_jax.envs.base import GameEnv

DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ALIASES = {"u": "up", "d": "down", "l": "left", "r": "right", "n": "up", "s": "down", "w": "left", "e": "right"}


class GridMaze(GameEnv):
    KIND = "game"
    SKILL = "spatial reasoning"
    NAME = "grid_maze"
    ACTION_EXAMPLE = "\\boxed{up}"
    SIZE = 7
    MIN_DISTANCE = 7
    SPARE_MOVES = 2

    def setup(self) -> str:
        while True:
            n = self.SIZE
            self.walls = {(r, c) for r in range(n) for c in range(n) if self.rng.random() < 0.3}
            free = [(r, c) for r in range(n) for c in range(n) if (r, c) not in self.walls]
            self.pos, self.exit = self.rng.sample(free, 2)
            dist = self.distances().get(self.pos)
            if dist is not None and dist >= self.MIN_DISTANCE:
                break
        self.moves_left = dist + self.SPARE_MOVES
        return (
            f"You are A in a {self.SIZE}x{self.SIZE} maze; # is a wall, . is open, E is the exit. Reach E within "
            f"{self.moves_left} moves (walking into a wall or the edge wastes a move). Each turn reply with "
            "one move in a box: \\boxed{up}, \\boxed{down}, \\boxed{left} or \\boxed{right}.\n" + self.render()
        )

    def render(self) -> str:
        rows = []
        for r in range(self.SIZE):
            row = ""
            for c in range(self.SIZE):
                cell = (r, c)
                row += "A" if cell == self.pos else "E" if cell == self.exit else "#" if cell in self.walls else "."
            rows.append(row)
        return "\n".join(rows)

    def distances(self) -> dict[tuple[int, int], int]:
        """Steps from every reachable cell to the exit."""
        dist = {self.exit: 0}
        queue = deque([self.exit])
        while queue:
            r, c = queue.popleft()
            for dr, dc in DIRS.values():
                nxt = (r + dr, c + dc)
                if 0 <= nxt[0] < self.SIZE and 0 <= nxt[1] < self.SIZE and nxt not in self.walls and nxt not in dist:
                    dist[nxt] = dist[(r, c)] + 1
                    queue.append(nxt)
        return dist

    def play(self, command: str):
        move = command.strip().lower()
        move = ALIASES.get(move, move)
        if move not in DIRS:
            return "Invalid move: use \\boxed{up}, \\boxed{down}, \\boxed{left} or \\boxed{right}."
        self.moves_left -= 1
        dr, dc = DIRS[move]
        nxt = (self.pos[0] + dr, self.pos[1] + dc)
        blocked = not (0 <= nxt[0] < self.SIZE and 0 <= nxt[1] < self.SIZE) or nxt in self.walls
        if not blocked:
            self.pos = nxt
        if self.pos == self.exit:
            return self.win("You reached the exit. You win!")
        if self.moves_left == 0:
            return self.lose("Out of moves before reaching the exit. You lose.")
        head = "Blocked! " if blocked else ""
        return f"{head}{self.moves_left} moves left.\n{self.render()}"

    def best_move(self) -> str:
        dist = self.distances()
        for name, (dr, dc) in DIRS.items():
            nxt = (self.pos[0] + dr, self.pos[1] + dc)
            if dist.get(nxt, 99) < dist[self.pos]:
                return name
        return "up"

    def hint(self) -> str:
        return (
            f"The shortest route is {self.distances()[self.pos]} moves and starts by going {self.best_move()}. "
            f"Trace the whole route on the map before moving; you have only {self.SPARE_MOVES} spare moves."
        )

    def reference_action(self) -> str:
        return self.boxed(self.best_move())

    def random_action(self, rng) -> str:
        return self.boxed(rng.choice(list(DIRS)))
