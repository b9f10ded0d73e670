"""Compile time is measured from JAX's own compile events: a new program adds to the total, running a compiled
one again adds nothing, and a progress line names the seconds of its phase that went to compiling."""

from __future__ import annotations

import io

import jax
import jax.numpy as jnp
from rich.console import Console

from spade_jax.compile_time import compile_seconds
from spade_jax.progress import StepProgress


def test_compile_seconds_counts_a_new_program_and_not_a_rerun() -> None:
    fn = jax.jit(lambda x: jnp.tanh(x) @ x.T + 3.0)
    x = jnp.ones((8, 8))
    before = compile_seconds()
    fn(x).block_until_ready()
    compiled = compile_seconds()
    assert compiled > before, "tracing and compiling a new program is counted"
    fn(x).block_until_ready()
    assert compile_seconds() == compiled, "running a compiled program is not"


def test_a_phase_line_says_how_many_of_its_seconds_went_to_compiling() -> None:
    out = io.StringIO()
    progress = StepProgress(1, console=Console(file=out, width=200, force_terminal=False))
    fn = jax.jit(lambda x: jnp.cos(x).sum(axis=0) * 2.0)
    x = jnp.ones((4, 4))
    with progress.phase("first call"):
        fn(x).block_until_ready()
    with progress.phase("second call"):
        fn(x).block_until_ready()
    progress.stop()
    lines = out.getvalue().splitlines()
    first = next(line for line in lines if "first call" in line)
    second = next(line for line in lines if "second call" in line)
    assert "of it compiling" in first
    assert "compiling" not in second
