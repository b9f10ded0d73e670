"""Local launcher: N processes on this machine joined into one JAX job (CPU backend or local GPUs).

python -m launch.local --processes 2 --dry-run -- loop.steps=4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make `launch` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from launch.common import DEFAULT_PORT, add_job_args, job_command, local_program, shell_join  # noqa: E402


def process_envs(args: argparse.Namespace) -> list[dict[str, str]]:
    """The extra environment of each process."""
    return [
        {
            "SPADE_COORDINATOR": f"127.0.0.1:{args.port}",
            "SPADE_NUM_PROCESSES": str(args.processes),
            "SPADE_PROCESS_ID": str(i),
            "SPADE_SHARED_RUN_DIR": "1",  # every process is on this host: a local run directory is shared
            **({"JAX_PLATFORMS": "cpu"} if args.cpu else {}),
        }
        for i in range(args.processes)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--cpu", action="store_true", help="force the CPU backend")
    parser.add_argument("--resume", action="store_true")
    add_job_args(parser)
    args = parser.parse_args(argv)
    cmd = job_command(args, local_program())  # this environment's, whether or not it is activated
    envs = process_envs(args)
    for env in envs:
        print(" ".join(f"{k}={v}" for k, v in env.items()), shell_join(cmd), flush=True)
    if args.dry_run:
        return 0
    procs = [subprocess.Popen(cmd, env={**os.environ, **env}) for env in envs]
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
