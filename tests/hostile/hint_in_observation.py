"""A hint that names the answer among options the observation lists (any multiple-choice game). Both checks
drop what the first observation already shows: the leak check excuses an answer "seen" there, and the audit's
echo replies only try hint words that are not in the observation. "Pick plum" passes both; a model picks plum.
(No control: TELL is unused.)"""

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


class OptionsEnv(GameEnv):
    KIND = "game"
    SKILL = "language understanding"
    NAME = "options"

    def setup(self) -> str:
        self.options = sorted(self.rng.sample(WORDS, 16))
        self.secret = self.rng.choice(self.options)
        return (
            "One of these foods is mine: " + ", ".join(self.options) + ". You have one try. Reply like \\boxed{plum}."
        )

    def play(self, command):
        if command.strip() == str(self.secret):
            return self.win("Correct. You win!")
        return self.lose(f"Wrong; it was {self.secret}.")

    def hint(self) -> str:
        return f"Pick {self.secret}."

    def reference_action(self) -> str:
        return self.boxed(self.secret)
