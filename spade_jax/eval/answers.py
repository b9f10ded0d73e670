"""Answer extraction and equivalence for the evaluation suites.

`final_answer` pulls the model's answer (last `\\boxed{}`, else an "answer is ..." line); `math_equal`
decides mathematical equivalence with `math-verify` (LaTeX and plain forms) and a sympy fallback;
`text_equal` compares short text answers; `choice_letter` reads a multiple-choice letter.
"""

from __future__ import annotations

import logging
import re
import signal
import threading

from spade_jax.envs.base import extract_boxed

__all__ = ["choice_letter", "final_answer", "gold_alternatives", "math_equal", "normalize_text", "text_equal"]

logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call with timeouts off
_ANSWER_LINE = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*(.+)", re.I)


def final_answer(text: str) -> str | None:
    """The content of the last `\\boxed{...}`; else what follows the last 'answer is'/'answer:'; else None."""
    boxed = extract_boxed(text or "")
    if boxed is not None:
        return boxed
    found = _ANSWER_LINE.findall(text or "")
    if found:
        return found[-1].strip().rstrip(".").strip("$ ").strip()
    return None


def normalize_text(text: str) -> str:
    """Lower case, no surrounding punctuation/markup, single spaces (for short text answers)."""
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text or "")
    text = re.sub(r"[\s$*`]+", " ", text).strip().lower()
    return text.strip(" .,:;!\"'")


def text_equal(pred: str | None, gold: str) -> bool:
    """Normalised equality of short text answers ('Yes.' == 'yes')."""
    return pred is not None and normalize_text(pred) == normalize_text(gold)


def gold_alternatives(gold: str) -> list[str]:
    """Splits a reference like 'C(10, 5), or equivalently 252' into its alternative forms."""
    parts = re.split(r",?\s+or\s+(?:equivalently|approximately|simply)?\s*", gold)
    return [p.strip().rstrip(".") for p in parts if p.strip()]


class _Timeout(Exception):
    pass


def _with_timeout(fn, seconds: float):
    """Runs fn with a SIGALRM deadline when on the main thread (sympy can hang on hostile input)."""
    if threading.current_thread() is not threading.main_thread():
        return fn()

    def on_alarm(*_):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _verify_latex(pred: str, gold: str) -> bool:
    try:
        from math_verify import LatexExtractionConfig, parse, verify
    except ImportError:
        return False
    cfg = [LatexExtractionConfig()]
    g = parse(f"${gold}$", extraction_config=cfg, parsing_timeout=None)
    p = parse(f"${pred}$", extraction_config=cfg, parsing_timeout=None)
    return bool(g and p and verify(g, p, timeout_seconds=None))


def _sympy_equal(pred: str, gold: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        factorial_notation,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    tr = standard_transformations + (factorial_notation, implicit_multiplication_application, convert_xor)

    def parse(s: str):
        s = s.replace("\\lfloor", "floor(").replace("\\rfloor", ")").replace("\\left", "").replace("\\right", "")
        s = s.replace("\\cdot", "*").replace("\\times", "*").replace("{", "(").replace("}", ")").replace("\\", "")
        return parse_expr(s, transformations=tr, evaluate=True)

    a, b = parse(pred), parse(gold)
    diff = sympy.simplify(a - b)
    if diff == 0:
        return True
    free = sorted(diff.free_symbols, key=str)
    if not free:
        return bool(abs(complex(sympy.N(diff))) < 1e-9 * max(1.0, abs(complex(sympy.N(b)))))
    for point in (3, 4, 7):  # integer points: the answers here are formulas in n, k, ...
        subs = {s: point + i for i, s in enumerate(free)}
        try:
            if abs(complex(sympy.N(diff.subs(subs)))) > 1e-9:
                return False
        except (TypeError, ValueError):
            return False
    return True


def math_equal(pred: str | None, gold: str, *, timeout_s: float = 5.0) -> bool:
    """True when `pred` is mathematically equivalent to (an alternative of) `gold`.

    Text answers (yes/no, 'no solutions') compare as normalised text; otherwise math-verify on the LaTeX
    forms, then a sympy simplification fallback. Any parse failure or timeout counts as not equal.
    """
    if pred is None or not str(pred).strip():
        return False
    pred = str(pred).strip()
    if text_equal(pred, gold):
        return True
    for alt in gold_alternatives(gold) or [gold]:
        if text_equal(pred, alt):
            return True
        if re.fullmatch(r"[A-Za-z ]+", alt.strip()) and len(alt.split()) > 0 and alt.strip().lower() != "n":
            continue  # a word answer ('Yes', 'No integer solutions'): only text equality counts
        for check in (_verify_latex, _sympy_equal):
            try:
                if _with_timeout(lambda c=check, a=alt: c(pred, a), timeout_s):
                    return True
            except Exception:  # unparsable, timeout, sympy errors: not equal
                continue
    return False


_LETTER = re.compile(r"answer\s*(?:is|:)\s*\(?([A-J])\)?(?![A-Za-z])|^\s*\(?([A-J])[).:]", re.I | re.M)


def choice_letter(text: str) -> str | None:
    """A multiple-choice letter from a reply: boxed letter, 'Answer: C', or a reply that starts with '(C)'."""
    boxed = extract_boxed(text or "")
    if boxed is not None:
        m = re.fullmatch(r"\(?\s*([A-Ja-j])\s*\)?(?:[.:].*)?", boxed.strip(), re.S)
        if m:
            return m.group(1).upper()
    found = [a or b for a, b in _LETTER.findall(text or "")]
    return found[-1].upper() if found else None
