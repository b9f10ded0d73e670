"""Clean shutdown on Ctrl-C and SIGTERM: both become exceptions in the main thread, so every `finally` runs.

`stop_on_signals()` (the command line wraps every command in it) makes the first SIGINT raise KeyboardInterrupt
and the first SIGTERM `Terminated`; a repeat while shutting down is only noted. `deferred()` marks a short
section (create a temp dir and record it for removal) that an interrupt must not split: a signal arriving
inside is raised when the section ends. Stdlib only: the sandbox code imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

_depth = 0  # deferred() sections open in the main thread
_pending: int | None = None  # a signal that arrived inside one
_stopping = False  # an interrupt was raised: the run is shutting down


class Terminated(KeyboardInterrupt):
    """SIGTERM raised in the main thread like Ctrl-C's KeyboardInterrupt, so that every `finally` runs the same
    way (checkpoint writes finished, sandboxes closed, their temp dirs removed); `signum` gives the exit code."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int) -> None:
    global _stopping
    _stopping = True
    raise Terminated(signum) if signum == signal.SIGTERM else KeyboardInterrupt


def _handler(signum: int, frame: object) -> None:
    global _pending
    if _stopping:
        print("spade-jax: still shutting down (closing sandboxes)", file=sys.stderr, flush=True)
    elif _depth:
        _pending = signum
    else:
        _raise(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While inside: the first SIGINT raises KeyboardInterrupt, the first SIGTERM `Terminated`; a repeat while
    the run shuts down only says so (a second Ctrl-C must not cut the cleanup short; SIGKILL still ends it).
    Outside the main thread it does nothing (signals can only be handled there)."""
    global _stopping, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stopping, _pending = False, None
    old = {sig: signal.signal(sig, _handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A section an interrupt must not split: under `stop_on_signals`, a signal arriving inside is raised when
    the outermost such section ends. Only the main thread runs signal handlers, so elsewhere it does nothing."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None:
            signum, _pending = _pending, None
            _raise(signum)


def exit_now(code: int) -> None:
    """Ends an interrupted command-line process without the interpreter's teardown, which, with XLA, Orbax and
    executor threads still around, crashed about 1 run in 8 with SIGSEGV after "interrupted". The `finally`
    blocks on the way out cleaned up; sandbox temp dirs whose removal the interrupt cut short are removed
    here, and the output streams flushed."""
    sandbox = sys.modules.get("spade_jax.sandbox.launchers")
    if sandbox is not None:
        sandbox.close_all()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
