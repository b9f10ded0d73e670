"""Tower of Hanoi with textarena's TowerOfHanoi-v0 rules (3 disks, 14 turns, an illegal move loses); our own code."""

from spade_jax.envs.base import GameEnv


class TowerOfHanoi(GameEnv):
    KIND = "game"
    SKILL = "strategic planning"
    NAME = "ta_tower_of_hanoi"
    ACTION_EXAMPLE = "\\boxed{A C}"
    DISKS = 3
    TURNS = 14

    def setup(self) -> str:
        self.towers = {"A": list(range(self.DISKS, 0, -1)), "B": [], "C": []}
        self.left = self.TURNS
        return (
            f"Tower of Hanoi with {self.DISKS} disks (1 is the smallest). Move the whole stack from tower A to "
            f"tower C in at most {self.TURNS} moves. Move one top disk per turn; never put a bigger disk on a "
            "smaller one (an illegal move loses). Reply with source and target tower in a box, e.g. \\boxed{A C}.\n"
            + self.board()
        )

    def board(self) -> str:
        return "\n".join(f"{t}: {self.towers[t]}" for t in "ABC")

    def play(self, command: str):
        parts = command.upper().replace(",", " ").replace("->", " ").split()
        if len(parts) != 2 or any(p not in self.towers for p in parts) or parts[0] == parts[1]:
            return "Invalid: name two different towers, e.g. \\boxed{A C}."
        src, dst = self.towers[parts[0]], self.towers[parts[1]]
        if not src or (dst and dst[-1] < src[-1]):
            return self.lose("Illegal move. You lose.")
        dst.append(src.pop())
        self.left -= 1
        if len(self.towers["C"]) == self.DISKS:
            return self.win("All disks are on C. You win!")
        if self.left == 0:
            return self.lose("Out of moves. You lose.\n" + self.board())
        return f"Moved. {self.left} moves left.\n" + self.board()

    def _solve(self, n, src, dst, via, out):
        if n:
            self._solve(n - 1, src, via, dst, out)
            out.append((src, dst))
            self._solve(n - 1, via, dst, src, out)

    def reference_action(self) -> str:
        moves = []
        self._solve(self.DISKS, "A", "C", "B", moves)
        done = self.TURNS - self.left
        src, dst = moves[min(done, len(moves) - 1)]
        return self.boxed(f"{src} {dst}")

    def random_action(self, rng) -> str:
        a, b = rng.sample("ABC", 2)
        return self.boxed(f"{a} {b}")

    def hint(self) -> str:
        return "Recursive plan: move the top n-1 disks to the spare tower, the biggest to C, then the n-1 onto it."
