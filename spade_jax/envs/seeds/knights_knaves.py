"""Reasoning (logical deduction): knights always tell the truth, knaves always lie; who is who?"""

import itertools

from spade_jax.envs.base import ReasoningEnv

NAMES = ("Ada", "Ben", "Cal", "Dot", "Eve", "Fay")


class KnightsKnaves(ReasoningEnv):
    KIND = "reasoning"
    SKILL = "logical deduction"
    NAME = "knights_knaves"
    PEOPLE = 4

    def statement(self, speaker: int):
        kind = self.rng.randrange(3)
        a, b = self.rng.sample([i for i in range(self.PEOPLE) if i != speaker], 2)
        if kind == 0:
            return f"{NAMES[a]} is a knave.", lambda w: not w[a]
        if kind == 1:
            return f"{NAMES[a]} and {NAMES[b]} are the same kind.", lambda w: w[a] == w[b]
        return f"At least one of {NAMES[a]} and {NAMES[b]} is a knight.", lambda w: w[a] or w[b]

    def setup(self) -> str:
        while True:
            said = [self.statement(i) for i in range(self.PEOPLE)]
            worlds = [
                w
                for w in itertools.product([True, False], repeat=self.PEOPLE)
                if all(w[i] == check(w) for i, (_, check) in enumerate(said))
            ]
            if len(worlds) == 1:
                break
        self.solution = "".join("K" if knight else "N" for knight in worlds[0])
        lines = "\n".join(f'{NAMES[i]} says: "{text}"' for i, (text, _) in enumerate(said))
        return (
            "On this island every person is a knight (always tells the truth) or a knave (always lies).\n"
            f"{lines}\nWho is a knight? Answer with {self.PEOPLE} letters for {', '.join(NAMES[: self.PEOPLE])} in "
            f"order, K for knight and N for knave, e.g. \\boxed{{{('KN' * self.PEOPLE)[: self.PEOPLE]}}}."
        )

    def check_answer(self, answer: str) -> bool:
        return answer.replace(" ", "").replace(",", "").upper() == self.solution

    def hint(self) -> str:
        return "Try assuming the first person is a knight, follow what that forces, and check for a contradiction."

    def reference_action(self) -> str:
        return self.boxed(self.solution)

    def random_action(self, rng) -> str:
        return self.boxed("".join(rng.choice("KN") for _ in range(self.PEOPLE)))
