"""Mathematical reasoning: reach a target number from a start value with a few arithmetic operations."""

from spade_jax.envs.base import GameEnv

OPS = ("+3", "+5", "+7", "-2", "-4", "*2", "*3")


def apply(value: int, op: str) -> int:
    n = int(op[1:])
    return value + n if op[0] == "+" else value - n if op[0] == "-" else value * n


class NumberTarget(GameEnv):
    KIND = "game"
    SKILL = "mathematical reasoning"
    NAME = "number_target"
    ACTION_EXAMPLE = "\\boxed{*2}"
    OPERATIONS = 3
    MIN_MOVES = 4
    SPARE_MOVES = 1

    def setup(self) -> str:
        while True:
            self.ops = sorted(self.rng.sample(OPS, self.OPERATIONS))
            self.value = self.rng.randint(1, 9)
            self.target = self.value
            for _ in range(self.rng.randint(self.MIN_MOVES, self.MIN_MOVES + 1)):
                self.target = apply(self.target, self.rng.choice(self.ops))
            dist = self.moves_needed(self.value, self.MIN_MOVES + 1)
            if dist is not None and dist >= self.MIN_MOVES and self.target > 0:
                break
        self.moves_left = dist + self.SPARE_MOVES
        return (
            f"Start at {self.value}. Reach exactly {self.target} in at most {self.moves_left} moves. "
            f"Each move applies one operation: {', '.join(self.ops)}. If you run out of moves, you lose. "
            "Reply with one operation in a box, e.g. \\boxed{" + self.ops[0] + "}."
        )

    def moves_needed(self, start: int, budget: int) -> int | None:
        """Fewest moves from `start` to the target, or None if more than `budget` are needed."""
        frontier, depth = {start}, 0
        while depth <= budget:
            if self.target in frontier:
                return depth
            frontier = {apply(v, op) for v in frontier for op in self.ops if abs(apply(v, op)) <= 5000}
            depth += 1
        return None

    def play(self, command: str):
        op = command.replace(" ", "").replace("x", "*").replace("×", "*")
        if op not in self.ops:
            return f"Invalid: choose one of {', '.join(self.ops)}, e.g. \\boxed{{{self.ops[0]}}}."
        self.value = apply(self.value, op)
        self.moves_left -= 1
        if self.value == self.target:
            return self.win(f"{op} gives {self.value}. Target reached: you win!")
        if self.moves_left == 0:
            return self.lose(f"{op} gives {self.value}. No moves left (target {self.target}): you lose.")
        return f"{op} gives {self.value}. Target {self.target}, {self.moves_left} moves left."

    def hint(self) -> str:
        return (
            "Work backwards from the target: undo operations (subtract, add back, or divide when it "
            "divides evenly) until you reach the start value; then play those steps forwards."
        )

    def reference_action(self) -> str:
        for op in self.ops:
            need = self.moves_needed(apply(self.value, op), self.moves_left - 1)
            if need is not None:
                return self.boxed(op)
        return self.boxed(self.ops[0])

    def random_action(self, rng) -> str:
        return self.boxed(rng.choice(self.ops))
