"""Environment text made safe for the host: what an untrusted environment returns is text, nothing more.

`valid_text` makes a string valid UTF-8 (JSON's `\\udc80` escapes decode to lone surrogates, which the
tokenizer, SQLite and `print` refuse); `clean_value` does it for a whole decoded value and bounds its nesting;
`printable` is the one escape for environment text shown on a terminal; `safe_label` makes a name or skill that
came from a file, a manifest or a program's attributes one short line of plain text. Nothing here raises on text.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_DEPTH", "clean_value", "printable", "printable_line", "safe_label", "valid_text"]

MAX_DEPTH = 32  # nesting levels a reply value may have (ToolEnv's tool schemas need ~7)
_SURROGATES = re.compile("[\ud800-\udfff]")
# C0 controls but tab and newline, DEL, C1 (CSI \x9b, OSC \x9d...), and the bidi overrides that reorder a line
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def valid_text(text: str) -> str:
    """`text` encodable as UTF-8: lone surrogates (what a JSON `\\udc80` escape decodes to) become U+FFFD."""
    return text if text.isascii() else _SURROGATES.sub("\ufffd", text)


def clean_value(value: Any, depth: int = 0) -> Any:
    """A copy of a decoded JSON value that host code can use as it likes: every string (keys too) valid UTF-8.

    Raises ValueError with a one-line reason for a value nested deeper than MAX_DEPTH levels, or one that is
    not plain JSON data (the decoder makes none; a caller passing other objects gets the same refusal).
    """
    if isinstance(value, str):
        return valid_text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if not isinstance(value, list | dict):
        raise ValueError(f"a value that is not plain data ({type(value).__name__})")
    if depth >= MAX_DEPTH:
        raise ValueError(f"a value nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [clean_value(v, depth + 1) for v in value]
    return {valid_text(str(k)): clean_value(v, depth + 1) for k, v in value.items()}


def printable(text: Any, *, json_escapes: bool = False) -> str:
    """`text` (any value, as str) safe to print on a terminal.

    Control characters that could move the cursor, repaint a verdict, retitle the window or write the clipboard
    (ESC/CSI/OSC sequences, CR, BEL, backspace, C1 codes, bidi overrides) are shown as escapes: `\\x1b`, or
    `\\u001b` with `json_escapes` (for JSON text, where that is the same string). Newlines and tabs are kept;
    lone surrogates become U+FFFD. Never raises.
    """
    try:
        text = text if isinstance(text, str) else str(text)
    except Exception as e:  # a str() that raises: name the type instead
        text = f"<unprintable {type(text).__name__}: {type(e).__name__}>"

    def escape(m: re.Match) -> str:
        code = ord(m.group())
        return f"\\x{code:02x}" if code < 0x100 and not json_escapes else f"\\u{code:04x}"

    return _CONTROLS.sub(escape, valid_text(text))


def safe_label(text: Any, *, limit: int = 200) -> str:
    """`text` as a label that every store and terminal takes (a name, a skill): valid UTF-8, no control
    characters (each becomes a space), one line of at most `limit` characters, whitespace collapsed."""
    try:
        text = text if isinstance(text, str) else str(text)
    except Exception:
        return ""
    text = _CONTROLS.sub(" ", valid_text(text))
    return " ".join(text.split())[:limit]


def printable_line(text: Any) -> str:
    """`printable(text)` on one line (newlines and tabs become spaces): an error line that quotes a file name or
    environment text cannot repaint the terminal or pass for a second line."""
    return " ".join(printable(text).split())
