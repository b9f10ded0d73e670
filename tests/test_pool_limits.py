"""Per-sandbox bounds (issue 18): memory and processes bounded for the whole sandbox, not per process; SysV IPC
objects gone at every session's end; at bwrap, no new namespaces, mounts or risky kernel interfaces (seccomp);
what the host cannot bound said loudly at start.

The hostile programs in tests/hostile/ (`memory_*`, `sysv_*`) pass the static gate. The bound is the sandbox's
cgroup, so these tests read the kernel's own figures for it (its peak usage, its OOM kills), not ours. They
skip, with the reason, on a host that gives no writable cgroup.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from spade_jax.sandbox import cgroups, seccomp
from spade_jax.sandbox import launchers as sandbox
from spade_jax.sandbox.host_pool import HostPool
from spade_jax.sandbox.launchers import SandboxConfig

HOSTILE = Path(__file__).resolve().parent / "hostile"
CONFIG = dict(call_timeout_s=5.0, load_timeout_s=5.0, memory_mb=128, tmp_mb=32)
SESSIONS = 2  # places per worker
BOUND_MB = SESSIONS * 128 + 32 + 384  # SandboxConfig.limits: sessions x memory_mb + tmp_mb + 384
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


@needs_cgroup
@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["memory_forked_children", "memory_memfd", "sysv_shm_fill"])
def test_memory_is_bounded_for_the_whole_sandbox(pool, name):
    """Each program would hold 900+ MB in pieces no per-process limit sees; the sandbox as a whole never goes
    over its bound (the kernel's peak for its cgroup), the call is the environment's memory failure, and the
    next environment is served."""
    result, proc = _play(pool, name)
    assert not result.ok and result.error == "memory", result
    assert f"({BOUND_MB} MB)" in result.message
    with pool.open((HOSTILE / "sysv_shm_leave.py").read_text()) as s:  # the pool serves on
        assert s.reset(0).ok
    peak = proc.peak_mb if not proc.alive() else proc.cgroup.peak_mb()
    assert 0 < peak <= BOUND_MB + 2, peak  # the kernel charges in batches of pages: a page or so over at most


@pytest.mark.sandbox
@pytest.mark.parametrize("name, key", [("sysv_shm_leave", "visible"), ("sysv_msg_leave", "seen")])
def test_sysv_objects_do_not_reach_the_next_session(pool, name, key):
    """The program leaves a segment / a queued message under a fixed key; the next session of it (another
    uid) finds nothing: no segment visible at all, no message waiting."""
    first, _ = _play(pool, name)
    second, _ = _play(pool, name)
    assert first.ok and second.ok, (first, second)
    assert first.value[4]["left"]
    empty = 0 if key == "visible" else ""
    assert second.value[4][key] == empty, second.value[4]
    if key == "visible":
        assert second.value[4]["seen"] == ""


@needs_cgroup
@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_a_killed_sandbox_leaves_no_cgroup(level):
    with HostPool(num_workers=1, sandbox=SandboxConfig(level=level, **CONFIG), sessions_per_worker=SESSIONS) as pool:
        result, proc = _play(pool, "memory_memfd")
        dirs = list(proc.cgroup.dirs.values())
    assert result.error == "memory"
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


@pytest.mark.sandbox
@pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap not installed")
@pytest.mark.skipif(seccomp.program() is None, reason="the seccomp filter is x86-64 only")
def test_bwrap_refuses_namespaces_mounts_and_risky_kernel_interfaces():
    """Environment code at the bwrap level runs on the host kernel: it may not make a user namespace (unshare,
    clone; clone3 is ENOSYS so the C library falls back to clone), mount a tmpfs past the /tmp cap, or reach
    bpf, io_uring, userfaultfd, perf, keyrings, ptrace or setns."""
    with HostPool(num_workers=1, sandbox=SandboxConfig(level="bwrap", **CONFIG)) as pool:
        userns, _ = _play(pool, "userns_tmpfs")
        clone, _ = _play(pool, "clone_newuser")
        surface, _ = _play(pool, "kernel_surface")
        with pool.open((HOSTILE / "sysv_msg_leave.py").read_text()) as s:  # ordinary code still runs
            assert s.reset(0).ok and s.step("go").ok
    eperm, enosys = 1, 38
    u = userns.value[4]
    assert (u["unshare"], u["unshare_errno"], u["mount"], u["mount_errno"]) == (-1, eperm, -1, eperm)
    assert u["written_mb"] == 0
    c = clone.value[4]
    assert (c["clone"], c["clone_errno"], c["clone3"], c["clone3_errno"]) == (-1, eperm, -1, enosys)
    k = surface.value[4]
    assert k["allowed"] == [] and all(errno == eperm for _, errno in k["calls"].values()), k
