"""Strategic planning: Nim against a sharp opponent; whoever takes the last stone wins."""

from functools import reduce

from spade_jax.envs.base import GameEnv


class NimDuel(GameEnv):
    KIND = "game"
    SKILL = "strategic planning"
    NAME = "nim_duel"
    ACTION_EXAMPLE = "\\boxed{2 3}"
    MAX_HEAP = 7
    MIN_HEAPS = 3
    MAX_HEAPS = 4

    def setup(self) -> str:
        while True:
            count = self.rng.randint(self.MIN_HEAPS, self.MAX_HEAPS)
            self.heaps = [self.rng.randint(1, self.MAX_HEAP) for _ in range(count)]
            if reduce(lambda a, b: a ^ b, self.heaps) != 0 and sum(self.heaps) >= 8:
                break
        return (
            "Nim: there are heaps of stones. On your turn remove 1 or more stones from ONE heap; then I "
            "move. Whoever takes the LAST stone wins. Reply with the heap number and how many to take, "
            f"e.g. \\boxed{{2 3}} takes 3 from heap 2.\nHeaps: {self.show()}"
        )

    def show(self) -> str:
        return "  ".join(f"heap {i + 1}: {h}" for i, h in enumerate(self.heaps))

    def parse(self, command: str):
        parts = command.replace(",", " ").split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        heap, count = int(parts[0]) - 1, int(parts[1])
        if not 0 <= heap < len(self.heaps) or not 1 <= count <= self.heaps[heap]:
            return None
        return heap, count

    def winning_move(self):
        x = reduce(lambda a, b: a ^ b, self.heaps)
        for i, h in enumerate(self.heaps):
            if x and h ^ x < h:
                return i, h - (h ^ x)
        return None

    def play(self, command: str):
        move = self.parse(command)
        if move is None:
            return f"Invalid move. Send heap number and count, e.g. \\boxed{{1 2}}.\nHeaps: {self.show()}"
        self.heaps[move[0]] -= move[1]
        if sum(self.heaps) == 0:
            return self.win("You took the last stone. You win!")
        reply = self.winning_move()
        if reply is None:
            i = self.rng.choice([i for i, h in enumerate(self.heaps) if h > 0])
            reply = (i, self.rng.randint(1, min(2, self.heaps[i])))
        self.heaps[reply[0]] -= reply[1]
        mine = f"I take {reply[1]} from heap {reply[0] + 1}."
        if sum(self.heaps) == 0:
            return self.lose(f"{mine} I took the last stone. You lose.")
        return f"{mine}\nHeaps: {self.show()}"

    def hint(self) -> str:
        return (
            "Write heap sizes in binary. After each of your moves, the XOR (nim-sum) of all heap sizes "
            "should be 0; then the opponent can never win."
        )

    def reference_action(self) -> str:
        move = self.winning_move() or (next(i for i, h in enumerate(self.heaps) if h), 1)
        return self.boxed(f"{move[0] + 1} {move[1]}")

    def random_action(self, rng) -> str:
        i = rng.randrange(len(self.heaps))
        return self.boxed(f"{i + 1} {rng.randint(1, max(1, self.heaps[i]))}")
