"""The heap-keeping malloc settings: the environment they add, the re-exec, and their effect on page faults."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from spade_jax import malloc

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc tunables (Linux)"
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", malloc.OPT_OUT)}
    return {**env, **extra}


def test_tunables_env_adds_ours_and_keeps_the_callers():
    env = malloc.tunables_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.cpu.hwcaps=-AVX2", "X": "1"})
    got = dict(kv.split("=", 1) for kv in env["GLIBC_TUNABLES"].split(":"))
    assert got["glibc.malloc.arena_max"] == "4"  # the caller's value wins
    assert got["glibc.cpu.hwcaps"] == "-AVX2"
    assert got["glibc.malloc.mmap_max"] == "0" and env["X"] == "1"


CHILD = """
import os, sys
from spade_jax import malloc
malloc.reexec_with_tunables()
print(os.environ.get("GLIBC_TUNABLES", ""))
"""


@glibc_only
def test_reexec_sets_the_tunables_once_and_respects_the_opt_out():
    run = lambda env: subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    res = run(_clean_env())
    assert res.returncode == 0, res.stderr
    assert set(malloc.TUNABLES) <= {kv.split("=")[0] for kv in res.stdout.strip().split(":")}
    res = run(_clean_env(**{malloc.OPT_OUT: "1"}))
    assert res.returncode == 0 and res.stdout.strip() == ""


FAULTS = """
import json, resource
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x) * 2.0)
x = jnp.ones((4096, 4096))  # 64 MiB in, a fresh 64 MiB result out of every call
for _ in range(6):  # compile, and the first uses of the buffers (the heap settles over a few calls)
    jax.block_until_ready(f(x))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    jax.block_until_ready(f(x))
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


@glibc_only
def test_repeated_jitted_calls_reuse_their_buffers_without_page_faults():
    """Under glibc's defaults each call's 64 MiB result (over the 32 MiB ceiling of glibc's adaptive mmap
    threshold, so always mapped afresh) faults in again: ~16K 4 KiB pages a call. With the tunables the calls
    reuse heap memory; the heap can still land beside another mapping and fall back to mmap for a call (it
    depends on address-space layout), so that side takes its best of 5 processes."""
    run = lambda env: json.loads(
        subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True).stdout
    )
    default = run(_clean_env())
    if default < 1000:
        pytest.skip(f"this system's default malloc already reuses the buffers ({default} faults in 3 calls)")
    assert min(run(malloc.tunables_env(_clean_env())) for _ in range(5)) < default / 2
