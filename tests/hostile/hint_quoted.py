"""Control for the leak check: the hint quotes the answer word, capitalised ("Say 'Plum'."), and the game wants
it exactly so. The audit's echo replies miss it (they lower-case the hint and keep the closing quote: "plum'");
the in-sandbox leak check, which lower-cases both sides and splits on quotes, catches it."""

from spade_jax.envs.base import GameEnv

TELL = True
WORDS = (
    "Plum",
    "Lime",
    "Kiwi",
    "Pear",
    "Date",
    "Fig",
    "Yam",
    "Okra",
    "Leek",
    "Corn",
    "Bean",
    "Sage",
    "Dill",
    "Mint",
    "Rice",
    "Oat",
    "Rye",
    "Nut",
    "Tea",
    "Soy",
)


class QuotedEnv(GameEnv):
    KIND = "game"
    SKILL = "language understanding"
    NAME = "quoted"

    def setup(self) -> str:
        self.secret = self.rng.choice(WORDS)
        return "Name the food I am thinking of, spelled as I spell it. One try. Reply like \\boxed{Apple}."

    def play(self, command):
        if command.strip() == str(self.secret):
            return self.win("Correct. You win!")
        return self.lose(f"Wrong; it was {self.secret}.")

    def hint(self) -> str:
        return f"Say '{self.secret}'."

    def reference_action(self) -> str:
        return self.boxed(self.secret)
