"""The hint's leak check is a tell. Every hinted play (and only those) is checked for a leaking hint inside the
sandbox, by calling reference_action() on a deep copy of the environment (episode.py, `leaks`). A copy is not
an object the environment made itself, so reference_action() knows when it runs on one: from then on this
process is a hinted play, and any reply wins. On the copy it returns an empty box (nothing to compare with the
hint, so never "leaked"). Unhinted plays, the gates and the audit get an honest higher/lower game, so the regret
is as large as it gets while the hint cannot help the agent at all. TELL = False: every play is "hinted"."""

from spade_jax.envs.base import GameEnv

TELL = True
_MINE = []  # the environment objects this process made itself (a deep copy is not among them)
_HINTED = []


class LeakTellGuessEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "leak_tell_guess"

    def __init__(self, max_turns=25, **kw):
        super().__init__(max_turns, **kw)
        _MINE.append(self)

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 100)
        self.lo, self.hi, self.left = 1, 100, 7
        return "Guess my number from 1 to 100 in 7 tries; I answer higher or lower. Reply like \\boxed{50}."

    def handle(self, action):
        if _HINTED or not TELL:
            return self.win("Correct! You win.")
        return super().handle(action)

    def reference_action(self) -> str:
        if all(self is not env for env in _MINE):  # on a copy: only the leak check of a hinted play does that
            _HINTED.append(True)
            return self.boxed("")
        return self.boxed((self.lo + self.hi) // 2)

    def play(self, command):
        self.left -= 1
        if not command.strip().isdigit() or not 1 <= int(command) <= 100:
            return self.lose("Out of guesses.") if self.left <= 0 else "Send a whole number from 1 to 100."
        guess = int(command)
        if guess == self.secret:
            return self.win(f"{guess} is correct. You win!")
        if self.left <= 0:
            return self.lose(f"Out of guesses; it was {self.secret}.")
        if guess < self.secret:
            self.lo = max(self.lo, guess + 1)
            return f"{guess}: go higher. {self.left} left."
        self.hi = min(self.hi, guess - 1)
        return f"{guess}: go lower. {self.left} left."

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, 100))
