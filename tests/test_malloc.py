"""Our malloc settings (huge pages for what malloc maps): the environment they add and the re-exec. Their effect on
page faults depends on the kernel's huge-page setting, so it is measured in benchmarks/malloc_faults.py, not here."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from spade_jax.infra import malloc

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc tunables (Linux)"
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", malloc.OPT_OUT)}
    return {**env, **extra}


def test_tunables_env_adds_ours_and_keeps_the_callers():
    env = malloc.tunables_env({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2", "X": "1"})
    got = dict(kv.split("=", 1) for kv in env["GLIBC_TUNABLES"].split(":"))
    assert got == {"glibc.cpu.hwcaps": "-AVX2", "glibc.malloc.hugetlb": "1"} and env["X"] == "1"
    env = malloc.tunables_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"  # the caller's value wins


CHILD = """
import os, sys
from spade_jax.infra import malloc
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
