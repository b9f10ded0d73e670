"""Per-sandbox bounds (issues 18, 47): a session holds memory only inside its own bounds (its RLIMIT_AS, its
tmpfs), so the sandbox's bound (their sum) is not reached through sessions; a sandbox that goes over a bound set
lower anyway is killed with its cgroup; what the host cannot bound is said loudly at start. The episode-level
seccomp filter itself is checked with the kernel's own answers in tests/test_containment_neighbours.py.

The hostile programs in tests/hostile/ (`memory_*`, `sysv_*`) pass the static gate. The bound is the sandbox's
cgroup, so these tests read the kernel's own figures for it (its peak usage, its OOM kills), not ours. They
skip, with the reason, on a host that gives no writable cgroup.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from spade_jax.sandbox import cgroups
from spade_jax.sandbox import launchers as sandbox
from spade_jax.sandbox.host_pool import HostPool
from spade_jax.sandbox.launchers import SandboxConfig

HOSTILE = Path(__file__).resolve().parent / "hostile"
CONFIG = dict(call_timeout_s=5.0, load_timeout_s=5.0, memory_mb=128, tmp_mb=32)
SESSIONS = 2  # places per worker
BOUND_MB = SESSIONS * (128 + 32 + 1) + 32 + 384  # SandboxConfig.limits: sessions x (memory_mb + tmp_mb + 1) + ...
NO_CGROUP = cgroups.probe(SandboxConfig(**CONFIG).limits("bwrap"))
LEVELS = [
    pytest.param("gvisor", marks=pytest.mark.skipif(not shutil.which("runsc"), reason="runsc (gVisor) not installed")),
    pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap not installed")),
]
needs_cgroup = pytest.mark.skipif(bool(NO_CGROUP), reason=f"no per-sandbox cgroup here: {NO_CGROUP}")


@pytest.fixture(scope="module", params=LEVELS)
def pool(request):
    p = HostPool(num_workers=1, sandbox=SandboxConfig(level=request.param, **CONFIG), sessions_per_worker=SESSIONS)
    yield p
    p.close()


def _play(pool: HostPool, name: str):
    """load, reset, one step of a hostile program; returns (step result, the sandbox process it ran in)."""
    with pool.open((HOSTILE / f"{name}.py").read_text()) as s:
        assert s.load_result.ok, s.load_result
        assert s.reset(0).ok
        proc = s._worker.proc
        return s.step("go"), proc


@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["memory_forked_children", "memory_memfd", "sysv_shm_fill", "sysv_shm_leave"])
def test_memory_outside_the_sessions_own_bound_is_out_of_reach(pool, name):
    """Each program would hold 900+ MB in pieces no per-process limit sees (children, memfd files, SysV
    segments); the episode may make none of them (its seccomp filter and guard: fork, memfd_create, SysV and
    ctypes are refused), so its memory is its own RLIMIT_AS and its tmpfs, the sandbox's bound (their sum over
    sessions) is never where it fails, and the next environment is served."""
    result, proc = _play(pool, name)
    assert (not result.ok and result.error == "exception" and "not allowed" in result.message) or (
        result.ok and result.value[4].get("mb") == 0
    ), result
    with pool.open((HOSTILE / "memory_bomb.py").read_text()) as s:  # over its own bound: its own failure
        assert s.reset(0).ok
        assert s.step("grow").error == "memory"
        assert s._worker is not None and s._worker.alive()
    if proc.cgroup is not None:
        assert proc.cgroup.peak_mb() <= BOUND_MB, proc.cgroup.peak_mb()


HOG = """
class Hog:
    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        self.held = [bytearray(b"x" * (10 << 20)) for _ in range(int(action) // 10)]
        return "holding", 0.0, False, False, {}
"""


@needs_cgroup
@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_a_killed_sandbox_leaves_no_cgroup(level):
    """A sandbox bound set below one session's own (300 MB for a session that may hold 512): the kernel kills at
    it, the call is that environment's memory failure (alone on the sandbox), and the cgroup goes with it."""
    config = SandboxConfig(level=level, **{**CONFIG, "memory_mb": 512, "sandbox_memory_mb": 300})
    with HostPool(num_workers=1, sandbox=config, sessions_per_worker=1) as pool:
        with pool.open(HOG) as s:
            assert s.reset(0).ok
            result = s.step("400")
            dirs = list(s._worker.proc.cgroup.dirs.values())
    assert result.error == "memory", result
    assert not [d for d in dirs if d.exists()], dirs


def test_no_cgroup_is_said_loudly_and_the_pool_still_serves(monkeypatch, tmp_path, caplog):
    """A host without writable cgroups (here: cgroupfs pointed at an empty dir) gets one warning naming what is
    not bounded, and sandboxes start without the bound."""
    monkeypatch.setattr(cgroups, "MOUNT", tmp_path)
    config = SandboxConfig(level="process", sandbox_memory_mb=777, **CONFIG)  # a key no other test probed
    with caplog.at_level(logging.WARNING, logger=sandbox.__name__):
        with HostPool(num_workers=1, sandbox=config) as pool:
            with pool.open((HOSTILE / "sysv_msg_leave.py").read_text()) as s:
                assert s.reset(0).ok
                assert s._worker.proc.cgroup is None
    lines = [r.getMessage() for r in caplog.records if "SANDBOX LIMITS" in r.getMessage()]
    assert len(lines) == 1 and "no cgroup filesystem" in lines[0] and "\n" not in lines[0], lines


@needs_cgroup
def test_cgroups_of_dead_runs_are_removed():
    """A run killed with -9 leaves its sandboxes' (empty) cgroups; the next start removes them, not ours."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    limits = SandboxConfig(**CONFIG).limits("bwrap")
    stale = cgroups.Cgroup.create(limits, name=f"spade-sandbox-{int(dead.stdout)}-0")
    ours = cgroups.Cgroup.create(limits)
    try:
        assert cgroups.remove_stale() >= 1
        assert not any(d.exists() for d in stale.dirs.values())
        assert all(d.exists() for d in ours.dirs.values())
    finally:
        stale.remove()
        ours.remove()
