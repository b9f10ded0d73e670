"""Page faults and peak memory of repeated jitted calls under glibc's default malloc, a heap that keeps what is freed
(our earlier setting) and our tunables (huge pages for what malloc maps).

Each call of a jitted function returns a fresh 64 MiB buffer, over the 32 MiB ceiling of glibc's adaptive
mmap threshold, so under the defaults every call maps (and faults in) new pages, 4 KiB at a time; with huge pages
the same mapping faults 2 MiB at a time; the kept heap reuses memory but holds on to it. The heap can land beside
another mapping and fall back to mmap for a call (it depends on address-space layout), and huge pages depend on
the kernel's setting, which is why this is a benchmark with N processes per side and not a test. Usage:

    python benchmarks/malloc_faults.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from spade_jax.infra import malloc

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
print(json.dumps([resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before,
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6]))
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", malloc.OPT_OUT)}


KEPT_HEAP = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.arena_max=1"


def faults(env: dict[str, str]) -> tuple[int, float]:
    """Minor page faults of 3 warm calls and the peak resident GB, in a fresh process with this environment."""
    out = subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True)
    n, peak = json.loads(out.stdout)
    return int(n), float(peak)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="processes per side")
    args = ap.parse_args()
    sides = {
        "glibc defaults": _clean_env(),
        "kept heap": {**_clean_env(), "GLIBC_TUNABLES": KEPT_HEAP},
        "spade-jax tunables": malloc.tunables_env(_clean_env()),
    }
    got = {name: [faults(env) for _ in range(args.runs)] for name, env in sides.items()}
    for name, xs in got.items():
        n = statistics.median(f for f, _ in xs)
        peak = statistics.median(p for _, p in xs)
        print(f"{name:>20}: median {n:>8.0f} faults in 3 calls, peak {peak:.2f} GB (faults: {[f for f, _ in xs]})")
    base = statistics.median(f for f, _ in got["glibc defaults"])
    ours = statistics.median(f for f, _ in got["spade-jax tunables"])
    print(f"ratio (defaults / tunables, medians): {base / max(ours, 1):.1f}x")


if __name__ == "__main__":
    main()
