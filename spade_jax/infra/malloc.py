"""glibc malloc settings for XLA:CPU: keep freed memory in the process while a phase runs, hand it back between
phases (`trim`).

By default glibc serves each large buffer with a fresh mmap (or a per-thread heap it trims) and returns it to
the OS when freed, so every jitted step pays page faults on gigabytes of buffers it had a moment before: a
SmolLM2-135M learner step of 4 x 512 tokens took 1.5 million minor faults and ~5 s of kernel time (of ~16 s)
on a 2-core machine, and ~13 s with the settings below. They must be set before the process starts, so
`spade-jax` and the benchmarks re-execute themselves once with them. Set SPADE_JAX_SYSTEM_MALLOC=1 to opt
out. The cost: freed memory stays in the process, so without more the process kept the sum of every phase's
leftovers (the sampler's KV cache, the learner's temporaries, XLA's compile-time memory) at its peak for its whole
life. `trim()` (glibc's malloc_trim, which returns every free page of the heap, not only its top) is called at the
boundaries of a run's phases (after the self-play phase, after the learner step, after the warm start): a phase
pays its page faults once when it starts, not on every buffer, and the peak is the largest phase's, not their sum.
"""

from __future__ import annotations

import os
import sys

TUNABLES = {
    "glibc.malloc.mmap_max": "0",  # no per-buffer mmap: big buffers come from the heap and are reused
    "glibc.malloc.trim_threshold": str(2**36),  # never shrink the heap on free
    "glibc.malloc.arena_max": "1",  # one heap, so a buffer freed by one thread is reused by the others
}
OPT_OUT = "SPADE_JAX_SYSTEM_MALLOC"


def tunables_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of env (default os.environ) whose GLIBC_TUNABLES also holds TUNABLES (the caller's own values
    for the same keys win)."""
    env = dict(os.environ if env is None else env)
    env["GLIBC_TUNABLES"] = ":".join(f"{k}={v}" for k, v in {**TUNABLES, **_tunables_of(env)}.items())
    return env


def applied() -> bool:
    """Whether this process started with every TUNABLES key set (to our value or the caller's own)."""
    return set(TUNABLES) <= set(_tunables_of(os.environ))


def _tunables_of(env) -> dict[str, str]:
    """The key=value pairs of env's GLIBC_TUNABLES."""
    return dict(kv.split("=", 1) for kv in env.get("GLIBC_TUNABLES", "").split(":") if "=" in kv)


def reexec_with_tunables() -> None:
    """Replaces this process by the same command line with TUNABLES set, on Linux with glibc, unless they are
    set already or the user opted out. Call first thing, before heavy imports (nothing else has run yet)."""
    if applied() or os.environ.get(OPT_OUT) or not sys.platform.startswith("linux"):
        return
    import platform

    if platform.libc_ver()[0] != "glibc":
        return
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], tunables_env())


def trim() -> bool:
    """Returns the heap's free pages to the OS (glibc `malloc_trim(0)`); False where there is no glibc. Cheap next to
    a phase (one pass over the heap's free chunks)."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False
