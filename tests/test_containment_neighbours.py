"""Class 3 of issue 47: sessions that share a worker share nothing.

The red team's programs (tests/hostile/neighbour_*.py) next to an honest session on ONE sandbox, at the gVisor
and bubblewrap levels: a CPU hog (forked spinners; threads that hash with the interpreter lock released), a flood
of files for the cleanup to walk, a POSIX message queue and mode-000 SysV segments left behind, children that take
the sandbox's shared memory bound. What must hold: the honest session's calls are never charged a timeout that a
neighbour caused (`unavailable` at worst), its episode goes on, no sandbox is replaced for a neighbour's doing,
nothing a session leaves reaches the next, and the sandbox's memory is not taken by leftovers. Beneath the
sandbox-level checks, the episode-level seccomp filter is checked with the kernel's own answers (a child process
installs it and makes each call), and `env-run` prints every program's text, at every level, with no traceback.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spade_jax.sandbox.host_pool import HostPool
from spade_jax.sandbox.launchers import SandboxConfig

HERE = Path(__file__).resolve().parent
HOSTILE = HERE / "hostile"
LEVELS = [
    pytest.param("gvisor", marks=pytest.mark.skipif(not shutil.which("runsc"), reason="runsc (gVisor) not installed")),
    pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap not installed")),
]
VICTIM = '''
class VictimEnv:
    """An honest game whose step() does some work (a solver, a generator): ~0.1-0.3 s of CPU."""

    def __init__(self, max_turns=25, work=60000, **kw):
        self.work, self.turn = work, 0

    def reset(self, seed=None):
        self.turn = 0
        return "Guess my number from 1 to 100. Reply like \\\\boxed{50}.", {}

    def step(self, action):
        self.turn += 1
        n = sum(1 for k in range(2, self.work) if all(k % d for d in range(2, int(k ** 0.5) + 1)))
        return f"Lower ({n}).", 0.0, self.turn >= 50, False, {}
'''
HUNGRY = '''
class HungryEnv:
    """An honest game that needs `mb` MB for its state (under its own memory limit)."""

    def __init__(self, max_turns=25, mb=200, **kw):
        self.mb = mb

    def reset(self, seed=None):
        self.table = bytearray(self.mb << 20)
        for i in range(0, len(self.table), 4096):
            self.table[i] = 1
        return "Guess. Reply like \\\\boxed{50}.", {}

    def step(self, action):
        return "Lower.", 0.0, True, False, {}
'''


def _hostile(name: str) -> str:
    return (HOSTILE / f"{name}.py").read_text(encoding="utf-8")


def _pool(level: str, sessions: int, **config) -> HostPool:
    return HostPool(num_workers=1, sandbox=SandboxConfig(level=level, **config), sessions_per_worker=sessions)


# ------------------------------------------------------------------------------------------ the filter


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the seccomp filter is x86-64 only")
def test_the_episode_filter_refuses_with_the_kernels_own_answer():
    """A child installs the episode's filter as an episode does (guard.install_seccomp) and makes each call: a new
    process, exec, sockets, SysV and POSIX message-queue IPC, memfd, namespaces, mounts and the kernel's big
    interfaces all fail with EPERM (clone3 ENOSYS, so the C library falls back to clone, whose flags the filter
    reads); a thread still starts. These are the kernel's answers, not ours."""
    code = textwrap.dedent(
        """
        import ctypes, json, os, threading
        from spade_jax.sandbox import seccomp
        from spade_jax.sandbox.inside import guard
        libc = ctypes.CDLL(None, use_errno=True)
        assert guard.install_seccomp(seccomp.episode_program())
        calls = {
            "fork": (57,), "vfork": (58,), "execve": (59, b"/bin/true", None, None), "socket": (41, 1, 1, 0),
            "socketpair": (53, 1, 1, 0, None), "shmget": (29, 0, 4096, 0o1600), "msgget": (68, 0, 0o1600),
            "semget": (64, 0, 1, 0o1600), "mq_open": (240, b"x", 0o100, 0o600, None), "memfd_create": (319, b"x", 0),
            "unshare": (272, 0x10000000), "mount": (165, b"n", b"/", b"tmpfs", 0, None),
            "clone_newuser": (56, 0x10000000 | 17, None, None, None, None),
            "clone_process": (56, 17, None, None, None, None), "clone3": (435, None, 0), "bpf": (321, 0, None, 0),
            "io_uring_setup": (425, 1, None), "keyctl": (250, 0, 0), "perf_event_open": (298, None, 0, -1, -1, 0),
            "ptrace": (101, 16, 1, None, None), "setns": (308, 0, 0), "userfaultfd": (323, 0),
        }
        out = {}
        for name, args in calls.items():
            rc = libc.syscall(*args)
            out[name] = (rc, ctypes.get_errno())
        t = threading.Thread(target=lambda: out.setdefault("thread", "ran")); t.start(); t.join()
        print(json.dumps(out))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    got = json.loads(proc.stdout.splitlines()[-1])
    eperm, enosys = 1, 38
    assert got.pop("thread") == "ran"
    assert got.pop("clone3") == [-1, enosys]
    assert {k: v for k, v in got.items() if v != [-1, eperm]} == {}, got


# ------------------------------------------------------------------------------------------------ CPU


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("attacker", ["neighbour_cpu_spin", "neighbour_cpu_threads"])
def test_a_cpu_hog_never_gets_its_neighbour_charged_a_timeout(level, attacker):
    """The hog starts next to an honest session; the honest session's next steps are never `timeout` (a
    neighbour's starving it is `unavailable`: not its designer's doing), and the sandbox is not replaced."""
    with _pool(level, 2, call_timeout_s=2.0) as pool:
        victim = pool.open(VICTIM)
        assert victim.reset(1).ok
        hog = pool.open(_hostile(attacker), env_kwargs={"n": 30 if attacker == "neighbour_cpu_spin" else 12})
        assert hog.reset(1).ok
        started = hog.step("go")  # forked spinners are refused (exception); threads run on (starving itself too:
        assert started.ok or started.error in ("exception", "timeout"), started  # its own timeout, its own fault)
        outcomes = [victim.step(f"\\boxed{{{i}}}") for i in range(4)]
        hog.close()
        assert [r.error for r in outcomes if not r.ok and r.error != "unavailable"] == [], outcomes
        after = pool.open(VICTIM)
        assert after.reset(2).ok and after.step("x").ok
        after.close()
        victim.close()
        assert pool.stats["workers_replaced"] == 0


# -------------------------------------------------------------------------------------------- cleanup


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_a_flood_of_files_costs_only_its_own_session(level):
    """Empty files as fast as they can be made, for several calls, then close: the cleanup does not walk them (a
    tmpfs of the session's own, dropped whole; capped in inodes or by the guard), close ends within its budget,
    the honest session beside it is served on, and no sandbox is replaced."""
    with _pool(level, 2, call_timeout_s=2.0) as pool:
        victim = pool.open(VICTIM)
        assert victim.reset(1).ok
        flood = pool.open(_hostile("neighbour_many_files"), env_kwargs={"seconds": 1.2})
        assert flood.reset(1).ok
        made = [flood.step("x") for _ in range(3)]
        t0 = time.monotonic()
        flood.close()
        took = time.monotonic() - t0
        assert took < 2.0, took
        assert victim.step("x").ok
        victim.close()
        assert pool.stats["workers_replaced"] == 0, (made, dict(pool.stats))


# ------------------------------------------------------------------------------------------------ IPC


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_no_message_queue_or_sysv_segment_outlives_its_session(level):
    """Three sessions in a row each read what the one before left in a POSIX message queue and leave a marker
    (another uid each): nothing passes. Five sessions in a row leave mode-000 SysV segments (2 x 90 MB each):
    none stays, and an honest environment that needs 200 MB then runs on that sandbox."""
    with _pool(level, 2, memory_mb=256, call_timeout_s=5.0) as pool:
        seen = []
        for _ in range(3):
            with pool.open(_hostile("neighbour_mqueue")) as s:
                assert s.reset(1).ok
                r = s.step("x")
                seen.append(r.value[4]["seen"] if r.ok else "")
        assert seen == ["", "", ""], seen
        for _ in range(5):
            with pool.open(_hostile("neighbour_sysv_mode0"), env_kwargs={"count": 2, "mb": 90}) as s:
                assert s.reset(1).ok
                s.step("x")
        with pool.open(HUNGRY) as s:
            r = s.reset(1)
        assert r.ok, r
        assert pool.stats["workers_replaced"] == 0


# --------------------------------------------------------------------------------------------- memory


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_one_sessions_memory_excess_is_its_own(level):
    """Children that would take 8 x 200 MB of the sandbox's shared bound: a session holds no memory outside its
    own RLIMIT_AS and tmpfs (no process, memfd or SysV segment of its own; the bound is the sum of the sessions'
    own), so the attempt fails in that session alone and the honest session beside it goes on."""
    with _pool(level, 2, memory_mb=256, call_timeout_s=5.0) as pool:
        victim = pool.open(VICTIM)
        assert victim.reset(1).ok
        hog = pool.open(_hostile("neighbour_memory_fork"), env_kwargs={"mb": 200})
        assert hog.reset(1).ok
        attack = hog.step("go")
        assert not attack.ok and attack.error in ("exception", "memory"), attack
        assert hog.step("go").error in (None, "exception", "memory", "crashed")  # its own, whatever it is
        assert victim.step("x").ok
        hog.close()
        victim.close()
        assert pool.stats["workers_replaced"] == 0


# -------------------------------------------------------------------------------------------- env-run


@pytest.mark.parametrize("level", [*LEVELS, "process"])
def test_env_run_prints_hostile_text_without_a_traceback(level):
    """`spade-jax env-run` on programs whose text is hostile (terminal escapes, lone surrogates, floods), with a
    terminal that takes ASCII only: every transition is printed (escaped), the exit code is the programs', and
    no traceback of ours nor an error line appears."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "PYTHONIOENCODING": "ascii", "SPADE_JAX_SYSTEM_MALLOC": "1"}
    for name in ("surrogate_observation", "surrogate_exception", "terminal_escape", "stdout_flood", "poisoned_info"):
        argv = [sys.executable, "-m", "spade_jax.cli", "env-run", str(HOSTILE / f"{name}.py"), "--sandbox", level,
                "--seed", "1", "--actions", "\\boxed{5}", "--actions", "boom", "--hint",
                "--call-timeout", "3"]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, timeout=120, env=env)
        text = (proc.stdout + proc.stderr).decode("ascii", "replace")
        assert proc.returncode in (0, 1), (name, proc.returncode, text[-600:])
        assert "error:" not in proc.stderr.decode("ascii", "replace"), (name, text[-600:])
        assert not [line for line in text.splitlines() if line.startswith("Traceback")], (name, text[-600:])
        assert "[load]" in text and "[reset]" in text, (name, text[-600:])
        assert "\x1b" not in text, name
