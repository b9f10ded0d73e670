"""The sandbox's settings as a run names them: the isolation levels and the per-environment limits. The launchers
(`spade_jax/sandbox/launchers.py`) read the level names from here, so a config is checked without starting, or
importing, any sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LEVELS", "LEVEL_CHOICES", "SandboxLimits"]

LEVELS = ("gvisor", "bwrap", "process")  # strongest first
LEVEL_CHOICES = ("auto", *LEVELS)  # what a config or --sandbox may name ("auto": the strongest available)


@dataclass
class SandboxLimits:
    """Per-environment limits of the sandbox workers (sandbox.launchers.SandboxConfig; the level and call timeout
    are `RunConfig.sandbox` / `call_timeout_s`). 0 for the whole-sandbox bounds: automatic."""

    load_timeout_s: float = 10.0
    memory_mb: int = 512  # address space of one episode process
    cpu_seconds: int = 60  # CPU time of one session
    max_processes: int = 32  # processes of one episode's uid
    tmp_mb: int = 64  # its private /tmp
    sandbox_memory_mb: int = 0  # the whole sandbox (cgroup): every process, memfd and SysV segment together
    sandbox_processes: int = 0

    def __post_init__(self) -> None:
        if not self.load_timeout_s > 0:
            raise ValueError(f"sandbox_limits.load_timeout_s={self.load_timeout_s}; expected > 0")
        small = [k for k in ("memory_mb", "cpu_seconds", "max_processes", "tmp_mb") if getattr(self, k) < 1]
        if small:
            raise ValueError(f"sandbox_limits.{small[0]}={getattr(self, small[0])}; expected >= 1")
        if self.sandbox_memory_mb < 0 or self.sandbox_processes < 0:
            raise ValueError("sandbox_limits.sandbox_memory_mb and sandbox_processes must be >= 0 (0: automatic)")
