"""Answer check for reasoning-gym items (STANDARD LIBRARY ONLY: its source is also baked into pool envs).

Exact after normalisation (case, spaces, spaces around commas, trailing period), or numerically equal
(integers, decimals, fractions p/q) within a relative 1e-6.
"""

from fractions import Fraction


def _norm(text):
    text = " ".join(str(text).replace("\n", " ").split()).strip().strip(".").strip()
    return ", ".join(part.strip() for part in text.split(",")).lower()


def _number(text):
    s = str(text).replace(" ", "").replace("$", "").strip().rstrip(".")
    try:
        if "/" in s:
            p, q = s.split("/", 1)
            return Fraction(int(p), int(q))
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def rg_answer_ok(answer, gold):
    """True when `answer` matches the reference `gold` of a reasoning-gym item."""
    if answer is None:
        return False
    if _norm(answer) == _norm(gold):
        return True
    a, g = _number(answer), _number(gold)
    if a is None or g is None:
        return False
    return abs(a - g) <= Fraction(1, 10**6) * max(1, abs(g))
