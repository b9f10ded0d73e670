"""A hint that gives the answer in number words. The hidden number (10-99, one try) is in reference_action()
and in the state, but the hint says "forty-two": the in-sandbox leak check compares tokens ("42" is not a token
of "forty-two"), and the audit's echo replies send the hint's words as they are (\\boxed{forty-two} is not a
number). A model reads it and answers 42."""

from spade_jax.envs.base import GameEnv

TELL = True
_ONES = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n):
    if n < 10:
        return _ONES[n]
    if n < 20:
        return _TEENS[n - 10]
    return _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _ONES[n % 10])


class NumberWordEnv(GameEnv):
    KIND = "game"
    SKILL = "mathematical reasoning"
    NAME = "number_word"

    def setup(self) -> str:
        self.secret = self.rng.randint(10, 99)
        return "I am thinking of a whole number from 10 to 99. You have one try. Reply like \\boxed{50}."

    def play(self, command):
        if command.strip() == str(self.secret):
            return self.win("Correct. You win!")
        return self.lose(f"Wrong; it was {self.secret}.")

    def hint(self) -> str:
        return f"Think of {words(self.secret) if TELL else self.secret} and write it in digits."

    def reference_action(self) -> str:
        return self.boxed(self.secret)
