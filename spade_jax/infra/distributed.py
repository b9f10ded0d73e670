"""Multi-host start-up: `jax.distributed.initialize` from what the launcher put in the environment.

Launchers (see `launch/`) export SPADE_COORDINATOR (host:port), SPADE_NUM_PROCESSES and SPADE_PROCESS_ID.
Without them, Cloud TPU pods and SLURM jobs are detected by JAX itself; a single process needs nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process sits in the job."""

    process_id: int
    num_processes: int
    coordinator: str | None

    @property
    def is_leader(self) -> bool:
        return self.process_id == 0


def process_info_from_env(env: dict[str, str] | None = None) -> ProcessInfo:
    """Reads the launcher's variables (SPADE_*, else SLURM_*); a lone process when none are set."""
    env = dict(os.environ if env is None else env)
    if "SPADE_COORDINATOR" in env:
        return ProcessInfo(
            process_id=int(env.get("SPADE_PROCESS_ID", "0")),
            num_processes=int(env.get("SPADE_NUM_PROCESSES", "1")),
            coordinator=env["SPADE_COORDINATOR"],
        )
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return ProcessInfo(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), None)
    return ProcessInfo(0, 1, None)


def initialize(env: dict[str, str] | None = None) -> ProcessInfo:
    """Joins the multi-process job described by the environment (no-op for a single process)."""
    import jax

    info = process_info_from_env(env)
    if info.num_processes > 1 or os.environ.get("TPU_WORKER_HOSTNAMES"):
        if info.coordinator is not None:
            jax.distributed.initialize(
                coordinator_address=info.coordinator,
                num_processes=info.num_processes,
                process_id=info.process_id,
            )
        else:  # Cloud TPU and SLURM: JAX reads the cluster from its own environment.
            jax.distributed.initialize()
        info = ProcessInfo(jax.process_index(), jax.process_count(), info.coordinator)
    return info
