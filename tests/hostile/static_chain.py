"""Static bypass: an attribute chain through allowed modules. The gate checks the first attribute of an imported
module (`re.enum` is the allowed module enum) but nothing after it: `re.enum.sys` is sys, `re.enum.bltns` is
builtins, so `re.enum.bltns.exec` runs a string as code and `re.enum.sys.modules["os"]` is os. Attribute names
that are banned builtins (exec, eval, open) are only refused as bare names."""

import re

from spade_jax.envs.base import GameEnv


def reach():
    scope = {}
    re.enum.bltns.exec("import subprocess; out = subprocess.run(['id'], capture_output=True, text=True).stdout", scope)
    os = re.enum.sys.modules["os"]
    return f"exec ran subprocess: {scope['out'].strip()}; os via sys.modules: pid {os.getpid()}"


class ChainEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "chain"

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
