"""HostPool / EnvSession semantics: loading rules, structured failures, reuse, replacement, concurrency.

Runs at the `process` level (fast; same worker code as the sandboxed levels, which test_pool_levels.py
and test_pool_hostile.py cover).
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from spade_jax.sandbox.host_pool import CallResult, HostPool
from spade_jax.sandbox.launchers import SandboxConfig, SandboxUnavailable, detect_level

ENVS = Path(__file__).resolve().parent / "pool_envs"
TIMEOUT = 1.0


@pytest.fixture(scope="module")
def pool():
    p = HostPool(num_workers=2, sandbox=SandboxConfig(level="process", call_timeout_s=TIMEOUT, load_timeout_s=2.0))
    yield p
    p.close()


def src(body: str) -> str:
    return textwrap.dedent(body)


ECHO = src(
    """
    class Echo:
        def __init__(self, max_turns=3, tag="t"):
            self.max_turns, self.tag, self.n = max_turns, tag, 0

        def reset(self, seed=None):
            self.n = 0
            return f"{self.tag} seed={seed}", {"max_turns": self.max_turns}

        def step(self, action):
            self.n += 1
            if action == "boom":
                return {}["missing"]
            return action.upper(), 0.25, self.n >= self.max_turns, False, {"n": self.n}
    """
)


def test_reset_step_hint_values(pool):
    with pool.open(ECHO, env_kwargs={"max_turns": 2, "tag": "x", "unused": 1}) as s:
        assert s.load_result.ok
        value = dict(s.load_result.value)
        guards = value.pop("guards")  # the process level: no namespaces, the filter (x86-64) and the audit hook
        assert value == {"env_class": "Echo", "methods": [], "dropped_kwargs": ["unused"]}
        assert guards["hooked"] is True and guards["isolated"] is False
        assert s.reset(5) == CallResult(True, ["x seed=5", {"max_turns": 2}])
        assert s.step("go").value == ["GO", 0.25, False, False, {"n": 1}]
        assert s.step("again").value == ["AGAIN", 0.25, True, False, {"n": 2}]
        assert s.hint() == CallResult(True, None)  # no hint() defined
        assert s.level == "process"


def test_exception_carries_traceback_from_inside(pool):
    with pool.open(ECHO) as s:
        s.reset()
        r = s.step("boom")
        assert (r.ok, r.error) == (False, "exception")
        assert r.message == "KeyError: 'missing'"
        assert 'return {}["missing"]' in r.traceback and "<environment>" in r.traceback
        assert "episode.py" not in r.traceback and "worker.py" not in r.traceback  # the worker's frames are hidden
        assert s.step("fine").ok  # an exception does not end the session


def test_missing_and_forbidden_methods(pool):
    with pool.open(ECHO) as s:
        r = s.call("reference_action")
        assert r.error == "exception" and "AttributeError" in r.message and "reference_action" in r.message
        r = s.call("__class__")
        assert r.error == "exception" and "not callable" in r.message
        assert s.call("random_action", 3).error == "exception"


@pytest.mark.parametrize(
    "source,needle",
    [
        ("class A:\n    def reset(self:\n", "SyntaxError"),
        ("x = 1\n", "no environment class"),
        ("raise RuntimeError('at import')\n", "RuntimeError: at import"),
        (ECHO + "\nclass Other(Echo):\n    pass\nclass Third(Echo):\n    pass\n", "ENV_CLASS"),
        (ECHO + "\nENV_CLASS = 'Nope'\n", "ENV_CLASS names 'Nope'"),
        (ECHO.replace("self.max_turns, self.tag", "1 / 0; self.max_turns, self.tag"), "ZeroDivisionError"),
    ],
)
def test_load_errors(pool, source, needle):
    with pool.open(source) as s:
        r = s.load_result
        assert (r.ok, r.error) == (False, "load_error"), r
        assert needle in r.message + r.traceback
        assert s.reset(0) == r and s.step("x") == r  # later calls repeat the load failure


def test_env_class_and_most_derived_class(pool):
    two = ECHO + "\nclass Loud(Echo):\n    def step(self, a):\n        return a + '!', 0.0, True, False, {}\n"
    with pool.open(two) as s:
        assert s.load_result.value["env_class"] == "Loud"
    with pool.open(two + "\nENV_CLASS = 'Echo'\n") as s:
        assert s.load_result.value["env_class"] == "Echo"


def test_reset_without_seed_parameter_and_global_random(pool):
    code = src(
        """
        import random
        class G:
            def reset(self):
                return str(random.random()), {}
            def step(self, a):
                return str(random.random()), 0.0, False, False, {}
        """
    )
    values = []
    for _ in range(2):
        with pool.open(code) as s:
            values.append((s.reset(42).value, s.step("x").value))
    assert values[0] == values[1]  # a seed also seeds the global `random`: reproducible in any worker


def test_non_json_arguments_and_source_limits(pool):
    with pool.open(ECHO) as s:
        r = s.call("metadata", object())
        assert r.error == "exception" and "JSON" in r.message
    r = pool.open("x" * (SandboxConfig().max_source_bytes + 1)).load_result
    assert r.error == "load_error" and "bytes" in r.message
    assert pool.open(b"class A: pass").load_result.error == "load_error"  # type: ignore[arg-type]
    assert pool.open(ECHO, env_kwargs={"tag": {1, 2}}).load_result.error == "load_error"


def test_failure_ends_the_episode_and_closed_session_answers(pool):
    spin = src(
        """
        class Spin:
            def reset(self, seed=None):
                return "r", {}
            def step(self, a):
                while True:
                    pass
        """
    )
    s = pool.open(spin)
    started = pool.stats["workers_started"]  # after open: workers start on first use (this test may run first)
    s.reset()
    t0 = time.monotonic()
    r = s.step("x")
    assert r.error == "timeout" and time.monotonic() - t0 < TIMEOUT + 1.0
    assert s.step("x").error == "crashed" and "timed out" in s.step("x").message  # its process is gone: its doing
    s.close()
    s.close()  # idempotent
    assert s.reset().error == "unavailable" and "closed" in s.reset().message  # the host's: nobody to blame
    with pool.open(ECHO) as s2:  # the in-sandbox timeout kept the worker: no new sandbox was started
        assert s2.reset(1).ok
    assert pool.stats["workers_started"] == started


def test_episodes_in_one_worker_share_nothing():
    with HostPool(1, SandboxConfig(level="process")) as pool:
        leak = src(
            """
            import builtins, json
            class Leak:
                def reset(self, seed=None):
                    builtins.LEAKED = True
                    json.dumps = None
                    return "leaked", {}
                def step(self, a):
                    return "", 0.0, True, False, {}
            """
        )
        probe = src(
            """
            import builtins, json
            class Probe:
                def reset(self, seed=None):
                    return "probe", {"leak": hasattr(builtins, "LEAKED"), "dumps": json.dumps is not None}
                def step(self, a):
                    return "", 0.0, True, False, {}
            """
        )
        with pool.open(leak) as s:
            assert s.reset().ok
        with pool.open(probe) as s:
            assert s.reset().value == ["probe", {"leak": False, "dumps": True}]
        assert pool.stats["workers_started"] == 1


def test_concurrent_sessions_over_map(pool):
    def episode(i: int):
        with pool.open(ECHO, env_kwargs={"tag": f"e{i}"}) as s:
            return [s.reset(i).value[0]] + [s.step(f"a{i}").value[0] for _ in range(3)]

    out = pool.map(episode, range(8))
    assert out == [[f"e{i} seed={i}"] + [f"A{i}"] * 3 for i in range(8)]
    assert pool.stats["workers_started"] <= 2


def test_host_kills_a_hung_sandbox_and_replaces_it():
    """The zygote itself stops answering (SIGSTOP): the host-side deadline kills the whole sandbox."""
    with HostPool(1, SandboxConfig(level="process", call_timeout_s=0.5)) as pool:
        s = pool.open(ECHO)
        assert s.reset().ok
        (worker,) = pool._live
        os.kill(worker.proc.popen.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        r = s.step("x")
        assert r.error == "unavailable" and "sandbox killed" in r.message  # the host's failure, not the env's
        # without the host deadline the call would never return; the bound is loose so load cannot fail it
        assert time.monotonic() - t0 < 15.0
        assert worker.proc.popen.poll() is not None  # really gone
        assert s.step("x").error == "unavailable"
        s.close()
        with pool.open(ECHO) as s2:
            assert s2.reset(3).value[0] == "t seed=3"
        assert pool.stats["workers_replaced"] == 1 and pool.stats["workers_started"] == 2


def test_worker_killed_while_idle_is_replaced():
    with HostPool(1, SandboxConfig(level="process")) as pool:
        with pool.open(ECHO) as s:
            assert s.reset().ok
        (worker,) = pool._live
        worker.proc.popen.kill()
        worker.proc.popen.wait()
        with pool.open(ECHO) as s:
            assert s.reset(9).value[0] == "t seed=9"


def test_episode_runs_as_unprivileged_uid(pool):
    code = src(
        """
        import os, resource
        class U:
            def reset(self, seed=None):
                return "u", {"uid": os.getuid(), "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
                             "as": resource.getrlimit(resource.RLIMIT_AS)[0]}
            def step(self, a):
                return "", 0.0, True, False, {}
        """
    )
    with pool.open(code) as s:
        info = s.reset().value[1]
    assert info["as"] == 512 << 20
    if os.geteuid() == 0:
        assert info["uid"] != 0 and info["nproc"] == 32


def test_closed_pool_and_bad_config():
    p = HostPool(1, SandboxConfig(level="process"))
    p.close()
    assert p.open(ECHO).load_result.error == "unavailable"
    with pytest.raises(ValueError):
        SandboxConfig(level="docker")
    with pytest.raises(ValueError):
        HostPool(0, SandboxConfig(level="process"))
    with pytest.raises(SandboxUnavailable):
        detect_level("process", SandboxConfig(python="/nonexistent/python3"))


def test_host_death_leaves_no_episode_processes():
    """The trainer dies hard: the worker sees its channel close and kills every episode process it made."""
    import subprocess
    import sys

    code = textwrap.dedent(
        """
        import os, sys
        from spade_jax.sandbox.host_pool import HostPool
        from spade_jax.sandbox.launchers import SandboxConfig
        pool = HostPool(1, SandboxConfig(level="process"))
        s = pool.open(sys.stdin.read())
        print(s.reset().value[0], flush=True)
        os._exit(0)
        """
    )
    env = src(
        """
        import os, threading, time
        class F:
            def reset(self, seed=None):
                try:  # refused by the episode's filter and guard: a session is one process
                    if os.fork() == 0:
                        while True:
                            time.sleep(1)
                except PermissionError:
                    pass
                threading.Thread(target=lambda: [time.sleep(1) for _ in iter(int, 1)]).start()  # lives on
                return str(os.getuid()), {}
            def step(self, a):
                return "", 0.0, True, False, {}
        """
    )
    out = subprocess.run([sys.executable, "-c", code], input=env, capture_output=True, text=True, timeout=60)
    uid = int(out.stdout.split()[-1])
    if uid == os.geteuid():
        pytest.skip("no separate episode uid (not root): processes cannot be told apart")
    deadline = time.monotonic() + 10
    while _uid_processes(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _uid_processes(uid) == []


def _uid_processes(uid: int) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            except OSError:
                continue
            if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in lines):
                found.append(int(pid))
    return found
