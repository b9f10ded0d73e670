"""Static bypass: a module bound as a default argument. Inside the function the module is a parameter, which the
gate does not follow: `m._os.system` runs a shell command (its output to a file in the episode's own dir, read back)."""

import random

from spade_jax.envs.base import GameEnv


def reach(m=random):
    os = m._os
    status = os.system("echo reached os.system as $(id -un 2>/dev/null || id -u) > out.txt")
    fd = os.open("out.txt", os.O_RDONLY)
    text = os.read(fd, 200).decode()
    os.close(fd)
    return f"os.system -> {status}: {text.strip()}"


class DefaultArgEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "default_arg"

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
