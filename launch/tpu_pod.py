"""Cloud TPU VM pod launcher: create or reuse a slice, install the code on every worker, run the job.

    python -m launch.tpu_pod --name spade --zone us-east5-a --accelerator v5p-32 --dry-run -- loop.steps=200
JAX on a TPU pod finds its peers itself (`jax.distributed.initialize()` with no arguments).
"""

from __future__ import annotations

import argparse
import sys

if __package__ in (None, ""):  # run as a script: make `launch` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from launch.common import INSTALL_SYSTEM_DEPS, add_job_args, execute, job_command, refuse_unshared, shell_join  # noqa: E402


def slice_hosts(accelerator: str) -> int:
    """Hosts of a TPU slice type: the common types hold 8 cores (v4, v5p) or 8 chips (v5e, v6e) per host at most,
    so a count above 8 spans several hosts (v5p-8: one; v5p-64: eight; v5litepod-16: four)."""
    try:
        n = int(accelerator.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        raise SystemExit(f"error: --accelerator {accelerator!r}: expected a type like v5p-32 or v5litepod-16") from None
    return 1 if n <= 8 else max(2, n // 8)


def build_commands(args: argparse.Namespace) -> list[list[str]]:
    tpu = ["gcloud", "compute", "tpus", "tpu-vm"]
    where = ["--zone", args.zone] + (["--project", args.project] if args.project else [])
    commands: list[list[str]] = []
    if not args.reuse:
        create = tpu + ["create", args.name, *where, "--accelerator-type", args.accelerator, "--version", args.version]
        if args.spot:
            create.append("--spot")
        commands.append(create)
    if args.source == "local":
        commands.append(["tar", "czf", "/tmp/spade-jax.tgz", "--exclude=.venv", "--exclude=runs", "."])
        commands.append(tpu + ["scp", "/tmp/spade-jax.tgz", f"{args.name}:~/", *where, "--worker=all"])
        fetch = "mkdir -p spade-jax && tar xzf spade-jax.tgz -C spade-jax"
    else:
        fetch = f"rm -rf spade-jax && git clone --depth 1 {args.source} spade-jax"
    # every worker: the sandbox runtimes, the package, then one line saying which sandbox level this host got
    setup = (f"{fetch} && cd spade-jax && sudo bash {INSTALL_SYSTEM_DEPS} && python3 -m pip install -q -e '.[tpu]' "
             "&& python3 -m spade_jax.cli sandbox-level")  # fmt: skip
    run = f"cd spade-jax && {shell_join(job_command(args))}"
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
    parser.add_argument("--version", default="v2-alpha-tpuv5", help="TPU VM software version")
    parser.add_argument("--reuse", action="store_true", help="use an existing slice instead of creating one")
    parser.add_argument("--spot", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--source", default="local", help="'local' (copy this checkout) or a git URL")
    add_job_args(parser)
    args = parser.parse_args(argv)
    refuse_unshared(args.run_dir, slice_hosts(args.accelerator), "TPU VM workers share no disk")
    return execute(build_commands(args), dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
