# expect: determinism
# reason: different transcript.*reset\(\)
from spade_jax.envs.base import GameEnv


class Session(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "session"
    games_played = 0

    def setup(self) -> str:
        Session.games_played += 1
        self.secret = self.rng.randint(1, 200)
        self.left = 8
        return f"Game #{Session.games_played}. Guess my number from 1 to 200 in 8 tries, e.g. \\boxed{{100}}."

    def play(self, command: str):
        if not command.isdigit():
            return "Send a whole number, e.g. \\boxed{100}."
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose(f"It was {self.secret}.")
        return "higher" if guess < self.secret else "lower"
