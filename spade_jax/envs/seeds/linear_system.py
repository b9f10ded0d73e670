"""Reasoning (mathematical reasoning): solve two linear equations in two unknowns with integer answers."""

from spade_jax.envs.base import ReasoningEnv


def term(coef: int, var: str, first: bool) -> str:
    sign = "-" if coef < 0 else ("" if first else "+")
    mag = "" if abs(coef) == 1 else str(abs(coef))
    return f"{sign} {mag}{var}".strip() if not first else f"{sign}{mag}{var}"


class LinearSystem(ReasoningEnv):
    KIND = "reasoning"
    SKILL = "mathematical reasoning"
    NAME = "linear_system"
    MAX_ATTEMPTS = 2
    MAX_SOLUTION = 9
    MAX_COEF = 6

    def setup(self) -> str:
        m = self.MAX_SOLUTION
        self.x, self.y = self.rng.randint(-m, m), self.rng.randint(-m, m)
        while True:
            a, b, c, d = (self.rng.choice([k for k in range(-self.MAX_COEF, self.MAX_COEF + 1) if k]) for _ in range(4))
            if a * d - b * c != 0:
                break
        eqs = [f"{term(p, 'x', True)} {term(q, 'y', False)} = {p * self.x + q * self.y}" for p, q in ((a, b), (c, d))]
        return f"Solve for integers x and y:\n{eqs[0]}\n{eqs[1]}\nAnswer as x, y, e.g. \\boxed{{3, -2}}."

    def check_answer(self, answer: str) -> bool:
        parts = answer.replace("x", "").replace("y", "").replace("=", "").replace(";", ",").split(",")
        if len(parts) != 2:
            return False
        return self.same_number(parts[0], self.x) and self.same_number(parts[1], self.y)

    def hint(self) -> str:
        return "Multiply the equations so one variable has opposite coefficients, add them, then substitute back."

    def reference_action(self) -> str:
        return self.boxed(f"{self.x}, {self.y}")

    def random_action(self, rng) -> str:
        m = self.MAX_SOLUTION
        return self.boxed(f"{rng.randint(-m, m)}, {rng.randint(-m, m)}")
