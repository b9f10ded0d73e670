"""Page faults of repeated jitted calls under glibc's default malloc vs our heap-keeping tunables.

Each call of a jitted function returns a fresh 64 MiB buffer, over the 32 MiB ceiling of glibc's adaptive
mmap threshold, so under the defaults every call maps (and faults in) new pages; with `spade_jax.infra.malloc`'s
tunables the calls reuse heap memory. The heap can still land beside another mapping and fall back to mmap
for a call (it depends on address-space layout), which is why this is a benchmark with N processes per side
and not a test. Usage:

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
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", malloc.OPT_OUT)}


def faults(env: dict[str, str]) -> int:
    """Minor page faults of 3 warm calls in a fresh process with this environment."""
    out = subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="processes per side")
    args = ap.parse_args()
    sides = {"glibc defaults": _clean_env(), "spade-jax tunables": malloc.tunables_env(_clean_env())}
    got = {name: [faults(env) for _ in range(args.runs)] for name, env in sides.items()}
    for name, xs in got.items():
        print(f"{name:>20}: median {statistics.median(xs):>8.0f} faults in 3 calls (all: {xs})")
    base, ours = (statistics.median(xs) for xs in got.values())
    print(f"ratio (defaults / tunables, medians): {base / max(ours, 1):.1f}x")


if __name__ == "__main__":
    main()
