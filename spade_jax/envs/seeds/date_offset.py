"""Reasoning (mathematical reasoning): calendar arithmetic, which date comes N days after a given date."""

from spade_jax.envs.base import ReasoningEnv

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
LENGTHS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class DateOffset(ReasoningEnv):
    KIND = "reasoning"
    SKILL = "mathematical reasoning"
    NAME = "date_offset"
    MAX_ATTEMPTS = 2
    MIN_OFFSET = 20
    MAX_OFFSET = 150

    def setup(self) -> str:
        self.month = self.rng.randrange(12)
        self.day = self.rng.randint(1, LENGTHS[self.month])
        self.offset = self.rng.randint(self.MIN_OFFSET, self.MAX_OFFSET)
        day_of_year = sum(LENGTHS[: self.month]) + self.day - 1 + self.offset
        m = 0
        while day_of_year >= LENGTHS[m % 12]:
            day_of_year -= LENGTHS[m % 12]
            m += 1
        self.answer_month, self.answer_day = m % 12, day_of_year + 1
        return (
            f"Ignoring leap years (February always has 28 days), what date is {self.offset} days after "
            f"{MONTHS[self.month]} {self.day}? Answer as month name and day, e.g. \\boxed{{March 5}}."
        )

    def check_answer(self, answer: str) -> bool:
        words = answer.replace(",", " ").split()
        if len(words) != 2 or not words[1].rstrip("thsndr").isdigit():
            return False
        return words[0].capitalize() == MONTHS[self.answer_month] and int(words[1].rstrip("thsndr")) == self.answer_day

    def hint(self) -> str:
        return "First count the days left in the starting month, then subtract whole months one at a time."

    def reference_action(self) -> str:
        return self.boxed(f"{MONTHS[self.answer_month]} {self.answer_day}")

    def random_action(self, rng) -> str:
        m = rng.randrange(12)
        return self.boxed(f"{MONTHS[m]} {rng.randint(1, LENGTHS[m])}")
