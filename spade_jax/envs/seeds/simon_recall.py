"""Memory recall: a Simon game; each round adds one color and you must repeat the whole sequence."""

from spade_jax.envs.base import GameEnv

COLORS = ("red", "green", "blue", "yellow")
GOAL = 7


class SimonRecall(GameEnv):
    KIND = "game"
    SKILL = "memory recall"
    NAME = "simon_recall"
    ACTION_EXAMPLE = "\\boxed{red blue}"
    START = 3
    LIVES = 2

    def setup(self) -> str:
        self.sequence = [self.rng.choice(COLORS) for _ in range(self.START)]
        self.lives = self.LIVES
        return (
            f"Simon: remember a growing sequence of colors ({', '.join(COLORS)}). Each round I show only "
            "the NEW color; you reply with the WHOLE sequence so far, in order, separated by spaces. "
            f"Repeat a sequence of {GOAL} colors to win; {self.LIVES} mistake(s) lose.\n"
            f"The sequence starts: {' '.join(self.sequence)}. Reply e.g. \\boxed{{red green blue}}."
        )

    def play(self, command: str):
        said = command.lower().replace(",", " ").split()
        if not said or any(w not in COLORS for w in said):
            return f"Invalid: send colors from {', '.join(COLORS)} separated by spaces."
        if said != self.sequence:
            self.lives -= 1
            if self.lives == 0:
                return self.lose("Wrong sequence again. You lose.")
            n = len(self.sequence)
            return f"Wrong sequence ({self.lives} mistake left). Try the same sequence of {n} colors again."
        if len(self.sequence) == GOAL:
            return self.win(f"Perfect: all {GOAL} colors. You win!")
        self.sequence.append(self.rng.choice(COLORS))
        return f"Correct! New color: {self.sequence[-1]}. Now repeat all {len(self.sequence)} colors."

    def hint(self) -> str:
        return "Keep the full sequence written out in your reasoning every turn and append each new color to it."

    def reference_action(self) -> str:
        return self.boxed(" ".join(self.sequence))

    def random_action(self, rng) -> str:
        return self.boxed(" ".join(rng.choice(COLORS) for _ in range(rng.randint(self.START, GOAL))))
