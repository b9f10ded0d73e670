"""Control for the echo check: the hint is the answer as one digit ("The digit is 7."). The leak check misses it
(a lone number needs two digits to count, `significant`); the audit's echo replies, run where the agent is shown
the environment's own hint, catch it."""

from spade_jax.envs.base import GameEnv

TELL = True


class DigitEnv(GameEnv):
    KIND = "game"
    SKILL = "mathematical reasoning"
    NAME = "digit"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 9)
        return "I am thinking of a digit. You have one try. Reply like \\boxed{5}."

    def play(self, command):
        if command.strip() == str(self.secret):
            return self.win("Correct. You win!")
        return self.lose(f"Wrong; it was {self.secret}.")

    def hint(self) -> str:
        return f"The digit is {self.secret}."

    def reference_action(self) -> str:
        return self.boxed(self.secret)
