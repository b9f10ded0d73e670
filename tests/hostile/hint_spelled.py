"""A hint that spells the answer letter by letter. The answer is a word (reference_action() boxes it); the hint
says "p l u m": single letters are below the leak check's 3-character floor (`significant`), and the audit's
echo replies send "p", "l", "u", "m" one by one. A model joins them."""

from spade_jax.envs.base import GameEnv

TELL = True
WORDS = (
    "plum",
    "lime",
    "kiwi",
    "pear",
    "date",
    "fig",
    "yam",
    "okra",
    "leek",
    "corn",
    "bean",
    "sage",
    "dill",
    "mint",
    "rice",
    "oat",
    "rye",
    "nut",
    "tea",
    "soy",
)


class SpelledEnv(GameEnv):
    KIND = "game"
    SKILL = "language understanding"
    NAME = "spelled"

    def setup(self) -> str:
        self.secret = self.rng.choice(WORDS)
        return "Name the food I am thinking of. You have one try. Reply like \\boxed{apple}."

    def play(self, command):
        if command.strip() == str(self.secret):
            return self.win("Correct. You win!")
        return self.lose(f"Wrong; it was {self.secret}.")

    def hint(self) -> str:
        return "Its letters are " + (" ".join(self.secret) if TELL else self.secret) + ", in that order."

    def reference_action(self) -> str:
        return self.boxed(self.secret)
