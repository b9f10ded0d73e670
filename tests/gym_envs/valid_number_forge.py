# expect: valid
# reason: valid game environment NumberForgeEnv
"""Arithmetic target (mathematical reasoning): combine the given numbers with + - * / to hit a target.

No __init__ at all: the class keeps its own limits as class constants. The expression is parsed by a
small recursive-descent parser (never eval); each number may be used at most once; division must be exact.
The last failed attempt earns partial credit for getting close.
"""

import random
import re


class ExprError(Exception):
    pass


class _Parser:
    def __init__(self, text):
        self.tokens = re.findall(r"\d+|[-+*/()]|\S", text)
        self.pos = 0
        self.used = []

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        tok = self.peek()
        self.pos += 1
        return tok

    def parse(self):
        if not self.tokens:
            raise ExprError("empty expression")
        if len(self.tokens) > 40:
            raise ExprError("expression too long")
        value = self.expr()
        if self.peek() is not None:
            raise ExprError(f"unexpected '{self.peek()}'")
        return value

    def expr(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self):
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0 or value % rhs:
                    raise ExprError("division must be exact")
                value = value // rhs
        return value

    def factor(self):
        tok = self.take()
        if tok is None:
            raise ExprError("expression ends too early")
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise ExprError("missing ')'")
            return value
        if tok.isdigit() and len(tok) <= 6:
            self.used.append(int(tok))
            return int(tok)
        raise ExprError(f"unexpected '{tok}'")


class NumberForgeEnv:
    ATTEMPTS = 3
    TURN_LIMIT = 8

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            nums = [rng.randint(1, 10) for _ in range(4)] + [rng.choice([15, 20, 25, 50])]
            picked = rng.sample(nums, 4)
            expr, value = str(picked[0]), picked[0]
            for n in picked[1:]:
                op = rng.choice("+-*")
                if op == "*" and value * n > 999:
                    op = "+"
                value = value + n if op == "+" else value - n if op == "-" else value * n
                expr = f"({expr} {op} {n})"
            if 10 <= value <= 999 and value not in nums:
                break
        self.numbers, self.target, self.answer = nums, value, expr[1:-1]
        self.attempts_left, self.turn, self.done = self.ATTEMPTS, 0, False
        obs = (
            f"Numbers: {', '.join(map(str, nums))}. Target: {value}.\n"
            "Write an expression that uses some of the numbers (each at most once) with + - * / and "
            "parentheses and equals the target; division must be exact. Reply like \\boxed{(3 + 4) * 5}. "
            f"You have {self.ATTEMPTS} attempts."
        )
        return obs, {"target": value, "numbers": list(nums)}

    def solution(self):
        return "\\boxed{" + self.answer + "}"

    def _uses_allowed_numbers(self, used):
        pool = list(self.numbers)
        for n in used:
            if n not in pool:
                return False
            pool.remove(n)
        return True

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        m = re.search(r"\\boxed\{([^{}]*)\}", action or "")
        if m is None:
            if self.turn >= self.TURN_LIMIT:
                self.done = True
                return "Out of turns.", 0.0, False, True, {"turn": self.turn}
            return "Answer with an expression inside \\boxed{...}.", -0.1, False, False, {"turn": self.turn}
        self.attempts_left -= 1
        parser = _Parser(m.group(1))
        try:
            value = parser.parse()
            if not self._uses_allowed_numbers(parser.used):
                raise ExprError("it uses a number you were not given (or one number twice)")
        except ExprError as e:
            value, feedback = None, f"Invalid expression: {e}."
        else:
            feedback = f"Your expression equals {value}."
            if value == self.target:
                self.done = True
                return feedback + " Target hit!", 1.0, True, False, {"turn": self.turn, "value": value}
        info = {"turn": self.turn, "value": value, "attempts_left": self.attempts_left}
        if self.attempts_left <= 0:
            self.done = True
            closeness = 0.0 if value is None else max(0.0, 1.0 - abs(value - self.target) / self.target)
            return feedback + " No attempts left.", round(0.5 * closeness, 3), True, False, info
        if self.turn >= self.TURN_LIMIT:
            self.done = True
            return feedback + " Out of turns.", 0.0, False, True, info
        return feedback + f" {self.attempts_left} attempt(s) left.", 0.0, False, False, info
