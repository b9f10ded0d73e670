"""Compile time is measured from JAX's own compile events: a new program adds to the total, running a compiled
one again adds nothing, and a progress line names the seconds of its phase that went to compiling.

Run in a fresh interpreter: compiles in every thread count, so a thread left by an earlier test could
otherwise add to the total between two readings."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import io
    import jax, jax.numpy as jnp
    from rich.console import Console
    from spade_jax.infra.compile_time import compile_seconds
    from spade_jax.run.progress import StepProgress

    fn = jax.jit(lambda x: jnp.tanh(x) @ x.T + 3.0)
    x = jnp.ones((8, 8))
    before = compile_seconds()
    fn(x).block_until_ready()
    compiled = compile_seconds()
    fn(x).block_until_ready()
    print("new", compiled > before, "rerun", compile_seconds() == compiled)

    out = io.StringIO()
    progress = StepProgress(1, console=Console(file=out, width=200, force_terminal=False))
    g = jax.jit(lambda x: jnp.cos(x).sum(axis=0) * 2.0)
    with progress.phase("first call"):
        g(x).block_until_ready()
    with progress.phase("second call"):
        g(x).block_until_ready()
    progress.stop()
    for line in out.getvalue().splitlines():
        print("LINE", line)
""")


def _run() -> list[str]:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_compile_seconds_counts_a_new_program_and_not_a_rerun_and_phase_lines_say_it() -> None:
    lines = _run()
    assert "new True rerun True" in lines, lines  # a new program is counted, running it again is not
    first = next(line for line in lines if "first call" in line)
    second = next(line for line in lines if "second call" in line)
    assert "of it compiling" in first
    assert "compiling" not in second
