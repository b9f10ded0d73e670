# expect: valid
# reason: valid game environment GridCourierEnv
"""Spatial reasoning in the paper's Gym-style format: walk a parcel through a walled grid to its door.

Its __init__ takes a grid size but no max_turns: the class keeps its own turn cap (STEP_CAP).
Each reply is a string of moves (U, D, L, R); the position carries over between replies.
"""

import random
import re
from collections import deque

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


class GridCourierEnv:
    STEP_CAP = 20
    MOVES_PER_REPLY = 12

    def __init__(self, size=6):
        self.size = size

    def _path_length(self, start, goal):
        seen, queue = {start: 0}, deque([start])
        while queue:
            cell = queue.popleft()
            if cell == goal:
                return seen[cell]
            for dr, dc in MOVES.values():
                nxt = (cell[0] + dr, cell[1] + dc)
                if self._open(nxt) and nxt not in seen:
                    seen[nxt] = seen[cell] + 1
                    queue.append(nxt)
        return None

    def _open(self, cell):
        r, c = cell
        return 0 <= r < self.size and 0 <= c < self.size and cell not in self.walls

    def render(self):
        rows = []
        for r in range(self.size):
            row = ""
            for c in range(self.size):
                cell = (r, c)
                row += "@" if cell == self.pos else "*" if cell == self.goal else "#" if cell in self.walls else "."
            rows.append(row)
        return "\n".join(rows)

    def reset(self, seed=None):
        rng = random.Random(seed)
        cells = [(r, c) for r in range(self.size) for c in range(self.size)]
        while True:
            self.walls = set(rng.sample(cells, self.size + 3))
            free = [x for x in cells if x not in self.walls]
            start, goal = rng.sample(free, 2)
            dist = self._path_length(start, goal)
            if dist is not None and dist >= self.size:
                break
        self.start, self.pos, self.goal, self.turn, self.done = start, start, goal, 0, False
        self.shortest = dist
        obs = (
            "Deliver the parcel: move @ to the door * without walking through walls (#).\n"
            f"{self.render()}\n"
            "Reply with a string of moves, U for up, D for down, L for left and R for right, e.g. \\boxed{RRD}. "
            f"At most {self.MOVES_PER_REPLY} moves per reply and {self.STEP_CAP} replies; a move into a wall or off "
            "the grid stops that reply's walk."
        )
        return obs, {"position": list(start), "goal": list(goal)}

    def solution(self):
        prev = {self.pos: None}
        queue = deque([self.pos])
        while queue:
            cell = queue.popleft()
            for letter, (dr, dc) in MOVES.items():
                nxt = (cell[0] + dr, cell[1] + dc)
                if self._open(nxt) and nxt not in prev:
                    prev[nxt] = (cell, letter)
                    queue.append(nxt)
        path, cell = [], self.goal
        while prev[cell] is not None:
            cell, letter = prev[cell]
            path.append(letter)
        return "\\boxed{" + "".join(reversed(path)) + "}"

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        m = re.search(r"\\boxed\{([^{}]*)\}", action or "")
        moves = re.sub(r"[\s,]", "", m.group(1)).upper() if m else ""
        info = {"turn": self.turn}
        if not moves or not re.fullmatch(r"[UDLR]+", moves):
            feedback, reward = "Invalid reply: send moves like \\boxed{UURDL}.", -0.1
        else:
            stopped = ""
            for letter in moves[: self.MOVES_PER_REPLY]:
                dr, dc = MOVES[letter]
                nxt = (self.pos[0] + dr, self.pos[1] + dc)
                if not self._open(nxt):
                    stopped = f" Blocked moving {letter}; the walk stopped."
                    break
                self.pos = nxt
                if self.pos == self.goal:
                    break
            info["position"] = list(self.pos)
            if self.pos == self.goal:
                self.done = True
                return f"Delivered in {self.turn} replies!", 1.0, True, False, info
            feedback, reward = f"Now here:{stopped}\n{self.render()}", 0.0
        if self.turn >= self.STEP_CAP:
            self.done = True
            return feedback + "\nOut of replies.", 0.0, False, True, info
        return feedback, reward, False, False, info
