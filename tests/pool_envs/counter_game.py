"""Well-behaved game on the real contract (GameEnv): find a hidden number with higher/lower feedback."""

from spade_jax.envs.base import GameEnv


class CounterGame(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "counter_game"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 50)
        self.history = []
        return "Guess my number from 1 to 50. Reply like \\boxed{25}."

    def play(self, command: str):
        if not command.strip().lstrip("-").isdigit():
            return "Send a whole number, e.g. \\boxed{25}."
        guess = int(command)
        self.history.append(guess)
        if guess == self.secret:
            return self.win(f"{guess} is right after {len(self.history)} guesses.")
        return ("higher" if guess < self.secret else "lower") + f" (tries so far: {self.history})"

    def hint(self) -> str:
        return "Halve the interval each turn."

    def reference_action(self) -> str:
        return self.boxed(self.secret)

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, 50))
