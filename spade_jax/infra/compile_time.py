"""Seconds this process has spent compiling programs (tracing, lowering, XLA), from JAX's own compile events.

`compile_seconds()` is a running total: the difference across a phase is the phase's compile time (the
progress lines and each step's `time/compile`). A program found in the persistent compilation cache is
not compiled and adds nothing. Compiles in every thread count. If this JAX emits no such events, the
total stays 0 and nothing else changes.
"""

from __future__ import annotations

import threading

__all__ = ["COMPILE_EVENTS", "compile_seconds"]

COMPILE_EVENTS = frozenset({
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
})  # fmt: skip

_lock = threading.Lock()
_total = [0.0]
_installed = [False]


def _listen(event: str, duration: float, **_: object) -> None:
    if event in COMPILE_EVENTS:
        with _lock:
            _total[0] += duration


def compile_seconds() -> float:
    """Seconds spent compiling since the first call (which starts listening) in this process."""
    with _lock:
        if not _installed[0]:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(_listen)
            _installed[0] = True
        return _total[0]
