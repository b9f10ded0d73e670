"""glibc malloc settings for XLA:CPU: big buffers on transparent huge pages, freed memory handed back between phases
(`trim`).

By default glibc serves each large buffer with a fresh mmap and returns it to the OS when freed, so every jitted
step faults its buffers back in, 4 KiB at a time: a SmolLM2-135M learner step faults 2 million times. The setting
below (`glibc.malloc.hugetlb=1`) has malloc ask for transparent huge pages on the memory it maps, so the same
buffers fault in 2 MiB at a time (~110 thousand faults a step) and are still returned to the OS when freed.

An earlier setting kept every freed buffer in the process instead (no per-buffer mmap, a heap that never shrinks,
one arena). It was no faster and it doubled the peak, because the heap kept each phase's transients (XLA's
compile-time memory included) and placed later buffers above them. Measured on the demo's learner step (2 CPU
cores, SmolLM2-135M, two 1,000-token rows; steady steps, min of 3): kept heap 18.5 s, 22.4 s user + 8.9 s system,
peak 11.0 GB; huge pages 17.0 s, 21.1 + 6.0 s, peak 7.8 GB. On the demo's full learner batch (2 x 2,176 + 4 x 1,000
tokens): peak 15.0 GB kept, 7.9 GB now.

Where the kernel's transparent huge pages are off (`/sys/kernel/mm/transparent_hugepage/enabled` = never) the
setting does nothing and glibc's defaults apply: the same memory, more page faults. They must be set before the
process starts, so `spade-jax` and the benchmarks re-execute themselves once with them; SPADE_JAX_SYSTEM_MALLOC=1
opts out. `trim()` (glibc's malloc_trim, which returns every free page of the heap, not only its top) is called at
the boundaries of a run's phases (after the self-play phase, after the learner step, after the warm start), for
the small buffers that stay in the heap.
"""

from __future__ import annotations

import os
import sys

TUNABLES = {
    "glibc.malloc.hugetlb": "1",  # madvise(MADV_HUGEPAGE) on what malloc maps: 2 MiB faults instead of 4 KiB
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
