"""Shared pieces of the launchers: the job's command line and running or printing shell commands."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_PORT = 8476
CHECKOUT = Path(__file__).resolve().parents[1]
INSTALL_SYSTEM_DEPS = "scripts/install_system_deps.sh"  # the sandbox runtimes (runsc, bwrap), relative to a checkout


def is_remote(run_dir: str) -> bool:
    """gs://... (shared by every host), as `spade_jax.rundir.paths.is_remote`, without importing the package."""
    return run_dir.startswith("gs://")


def refuse_unshared(run_dir: str, hosts: int, why: str) -> None:
    """SystemExit with one line when a job on several hosts is given a run directory only one host sees."""
    if hosts > 1 and not is_remote(run_dir):
        raise SystemExit(
            f"error: {run_dir} is not shared by the {hosts} hosts ({why}): pass --run-dir gs://bucket/path"
        )


def add_job_args(parser: argparse.ArgumentParser) -> None:
    """Arguments every launcher passes through to `spade-jax` on each worker."""
    parser.add_argument("--command", default="selfplay", help="spade-jax subcommand to run (default: selfplay)")
    parser.add_argument("--preset", default="demo", help="run preset")
    parser.add_argument("--run-dir", default="runs/job", help="run directory (shared storage on multi-host)")
    parser.add_argument("--dry-run", action="store_true", help="print the exact commands instead of running them")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")


def local_program() -> str:
    """The `spade-jax` console script of this interpreter's environment (next to `sys.executable`), else the one
    on PATH; SystemExit with one line when there is neither."""
    here = Path(sys.executable).with_name("spade-jax")
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("spade-jax")
    if found is None:
        raise SystemExit(f"error: no spade-jax console script next to {sys.executable} or on PATH "
                         "(install the project: pip install -e .)")  # fmt: skip
    return found


def job_command(args: argparse.Namespace, program: str = "spade-jax") -> list[str]:
    """The `spade-jax` invocation each process runs (`program`: the console script to call)."""
    cmd = [program, args.command, "--preset", args.preset, "--run-dir", args.run_dir]
    if getattr(args, "resume", False):
        cmd.append("--resume")
    elif getattr(args, "resume_if_exists", False):
        cmd.append("--resume-if-exists")
    return cmd + list(args.overrides)


def shell_join(cmd: Sequence[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def execute(commands: list[list[str]], *, dry_run: bool, check: bool = True) -> int:
    """Prints every command when dry-running, else runs them in order and stops at the first failure."""
    for cmd in commands:
        print(shell_join(cmd), flush=True)
        if dry_run:
            continue
        rc = subprocess.run(cmd, check=False).returncode
        if rc != 0 and check:
            print(f"error: command failed with exit code {rc}: {shell_join(cmd)}", file=sys.stderr)
            return rc
    return 0
