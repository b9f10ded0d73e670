"""Cloud TPU VM pod launcher: create or reuse a slice, install the code on every worker, run the job.

    python -m launch.tpu_pod --name spade --zone us-east5-a --accelerator v5p-32 --dry-run -- loop.steps=200
JAX on a TPU pod finds its peers itself (`jax.distributed.initialize()` with no arguments).
"""

from __future__ import annotations

import argparse
import sys

if __package__ in (None, ""):  # run as a script: make `launch` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from launch.common import add_job_args, execute, job_command, shell_join  # noqa: E402


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
    setup = f"{fetch} && cd spade-jax && python3 -m pip install -q -e '.[tpu]'"
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
    return execute(build_commands(args), dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
