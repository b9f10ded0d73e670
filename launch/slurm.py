"""SLURM GPU launcher: writes an sbatch script (one process per node or per GPU) and submits it.

    python -m launch.slurm --nodes 2 --gpus-per-node 8 --per gpu --dry-run -- loop.steps=200
The first node of the allocation is the JAX coordinator; each task exports SPADE_PROCESS_ID from SLURM_PROCID.
Each task asks for the CPUs and memory of its sandbox pool (read from the run's config: workers and their bounds)
plus the JAX process's own; the job is requeued on preemption and then resumes (`--resume-if-exists`).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `launch` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from launch.common import (  # noqa: E402
    CHECKOUT,
    DEFAULT_PORT,
    INSTALL_SYSTEM_DEPS,
    add_job_args,
    execute,
    is_remote,
    job_command,
    refuse_unshared,
    shell_join,
)


def job_dir(args: argparse.Namespace) -> Path:
    """Where the sbatch script and SLURM's output go: the run directory, or --log-dir for a gs:// one."""
    return Path(args.log_dir if is_remote(args.run_dir) else args.run_dir)


def task_resources(args: argparse.Namespace) -> tuple[int, int]:
    """(CPUs, memory in MB) one task (one spade-jax process) needs: its sandbox pool (`num_workers` sandboxes, each
    bounded as the run configures them: `SandboxConfig.limits`, the rule the pool itself applies; one CPU each)
    plus `--host-cpus` and `--host-mem-gb` for the JAX process itself. `--cpus-per-task` / `--mem-per-task-gb`
    set them outright."""
    from spade_jax.config.run import load_run_config
    from spade_jax.sandbox.launchers import SandboxConfig

    cfg = load_run_config(args.preset, list(args.overrides))
    limits = SandboxConfig(**dataclasses.asdict(cfg.sandbox_limits)).limits("gvisor", cfg.sessions_per_worker)
    cpus = args.cpus_per_task or cfg.num_workers + args.host_cpus
    mem_mb = int(args.mem_per_task_gb * 1024) if args.mem_per_task_gb else (
        cfg.num_workers * limits.memory_mb + int(args.host_mem_gb * 1024))  # fmt: skip
    return cpus, mem_mb


def sbatch_script(args: argparse.Namespace) -> str:
    tasks_per_node = args.gpus_per_node if args.per == "gpu" else 1
    gpu_env = "export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID\n" if args.per == "gpu" else ""
    cpus, mem_mb = task_resources(args)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={args.job_name}",
        f"#SBATCH --nodes={args.nodes}",
        f"#SBATCH --ntasks-per-node={tasks_per_node}",
        f"#SBATCH --gpus-per-node={args.gpus_per_node}",
        f"#SBATCH --cpus-per-task={cpus}",  # the task's sandbox workers, one CPU each, and the JAX process
        f"#SBATCH --mem={mem_mb * tasks_per_node}M",  # per node: each task's sandbox pool bound and host memory
        f"#SBATCH --time={args.time}",
        f"#SBATCH --output={job_dir(args)}/slurm-%j.out",
        "#SBATCH --open-mode=append",  # a requeued job adds to its log instead of truncating it
    ]
    if not args.no_requeue:  # preempted or failed node: SLURM starts the job again, and it resumes exactly
        lines.append("#SBATCH --requeue")
    if args.partition:
        lines.append(f"#SBATCH --partition={args.partition}")
    deps = shlex.quote(str(CHECKOUT / INSTALL_SYSTEM_DEPS))
    shared = "" if is_remote(args.run_dir) else "export SPADE_SHARED_RUN_DIR=1  # a cluster file system\n"
    body = f"""
set -euo pipefail
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export SPADE_COORDINATOR="$head:{args.port}"
export SPADE_NUM_PROCESSES=$SLURM_NTASKS
{shared}# every node: the sandbox runtimes, then one line saying which sandbox level it got
srun --ntasks-per-node=1 --ntasks=$SLURM_JOB_NUM_NODES bash -c "bash {deps}; spade-jax sandbox-level"
srun --kill-on-bad-exit=1 bash -c '{gpu_env.strip() + "; " if gpu_env else ""}export SPADE_PROCESS_ID=$SLURM_PROCID; \
{shell_join(job_command(args))}'
"""
    return "\n".join(lines) + "\n" + body


def build_commands(args: argparse.Namespace) -> tuple[str, list[list[str]]]:
    script = sbatch_script(args)
    return script, [["sbatch", str(job_dir(args) / "job.sbatch")]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--per", choices=("node", "gpu"), default="node", help="one process per node or per GPU")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--time", default="24:00:00")
    parser.add_argument("--job-name", default="spade-jax")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--log-dir", default="runs/slurm", help="sbatch script and output for a gs:// run directory")
    parser.add_argument("--host-cpus", type=int, default=4, help="CPUs for the JAX process beside its sandboxes")
    parser.add_argument("--host-mem-gb", type=float, default=32.0, help="host memory of the JAX process")
    parser.add_argument("--cpus-per-task", type=int, default=None, help="set the CPUs of a task outright")
    parser.add_argument("--mem-per-task-gb", type=float, default=None, help="set the memory of a task outright")
    parser.add_argument(
        "--no-requeue",
        action="store_true",
        help="do not requeue the job after a preemption (by default it is, and resumes)",
    )
    parser.add_argument("--no-shared-fs", action="store_true",
                        help="the nodes share no file system: a local --run-dir is refused (use gs://)")  # fmt: skip
    add_job_args(parser)
    args = parser.parse_args(argv)
    # a requeued job finds its own run: --resume-if-exists resumes it, and starts it the first time
    args.resume_if_exists = not args.no_requeue and not args.resume
    if args.no_shared_fs:
        refuse_unshared(args.run_dir, args.nodes, "--no-shared-fs")
    script, commands = build_commands(args)
    if args.dry_run:
        print(script)
    else:
        job_dir(args).mkdir(parents=True, exist_ok=True)
        (job_dir(args) / "job.sbatch").write_text(script)
    return execute(commands, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
