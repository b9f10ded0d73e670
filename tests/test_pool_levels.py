"""Every sandbox level gives the same transitions as plain in-process exec, cleans up after itself, and the
`env-run` command drives the pool end to end."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from spade_jax.cli import main as cli_main
from spade_jax.sandbox.host_pool import HostPool
from spade_jax.sandbox.launchers import LEVELS, SandboxConfig, detect_level

ENVS = Path(__file__).resolve().parent / "pool_envs"
HAVE = {"gvisor": shutil.which("runsc"), "bwrap": shutil.which("bwrap"), "process": True}
LEVEL_PARAMS = [
    pytest.param(lv, marks=pytest.mark.skipif(not HAVE[lv], reason=f"{lv} runtime not installed")) for lv in LEVELS
]


@pytest.fixture(scope="module", params=LEVEL_PARAMS)
def pool(request):
    p = HostPool(num_workers=1, sandbox=SandboxConfig(level=request.param))
    yield p
    p.close()


def _reference(source: str, seed: int, actions: list, kwargs: dict) -> list:
    """The reference implementation's way: exec in this process, call the methods directly."""
    ns: dict = {"__name__": "reference_env"}
    exec(compile(source, "reference_env", "exec"), ns)
    cls = next(v for v in ns.values() if isinstance(v, type) and v.__module__ == "reference_env" and hasattr(v, "step"))
    env = cls(**kwargs)
    out = [list(env.reset(seed=seed))]
    if hasattr(env, "hint"):
        out.append(env.hint())
    for a in actions:
        out.append(list(env.step(a)))
    if hasattr(env, "reference_action"):
        out.append(env.reference_action())
        out.append(env.random_action(random.Random(5)))
    return json.loads(json.dumps(out))


def _in_pool(pool: HostPool, source: str, seed: int, actions: list, kwargs: dict) -> list:
    with pool.open(source, env_kwargs=kwargs) as s:
        assert s.load_result.ok, s.load_result
        results = [s.reset(seed)]
        has_hint = "hint" in s.load_result.value["methods"]
        if has_hint:
            results.append(s.hint())
        results += [s.step(a) for a in actions]
        if "reference_action" in s.load_result.value["methods"]:
            results += [s.call("reference_action"), s.call("random_action", 5)]
    assert all(r.ok for r in results), results
    return [r.value for r in results]


GAMES = [
    ("counter_game.py", {"max_turns": 6}, ["\\boxed{25}", "\\boxed{12}", "no box", "\\boxed{40}", "\\boxed{7}"]),
    ("plain_walk.py", {"max_turns": 8, "scale": 2.0}, ["left", "right", "stay", "left", "left", "right"]),
]


@pytest.mark.sandbox
@pytest.mark.parametrize("name,kwargs,actions", GAMES)
@pytest.mark.parametrize("seed", [0, 1234])
def test_identical_transitions_at_every_level(pool, name, kwargs, actions, seed):
    source = (ENVS / name).read_text()
    assert _in_pool(pool, source, seed, actions, kwargs) == _reference(source, seed, actions, kwargs)


@pytest.mark.sandbox
def test_workers_are_reused_and_calls_are_fast(pool):
    source = (ENVS / "plain_walk.py").read_text()
    started = pool.stats["workers_started"]
    for seed in range(3):
        with pool.open(source) as s:
            s.reset(seed)
            t0 = time.perf_counter()
            for _ in range(20):
                assert s.step("left").ok
            per_step = (time.perf_counter() - t0) / 20
    assert pool.stats["workers_started"] == started  # the same sandbox served all episodes
    assert per_step < 0.05, f"{pool.level}: {per_step * 1e3:.1f} ms per step"


@pytest.mark.sandbox
@pytest.mark.parametrize("level", [p for p in LEVEL_PARAMS if p.values[0] != "process"])
def test_close_leaves_no_sandbox_processes(level):
    pool = HostPool(num_workers=2, sandbox=SandboxConfig(level=level, call_timeout_s=1.0))
    source = (ENVS / "plain_walk.py").read_text()
    spin = "class S:\n    def reset(self, seed=None):\n        return 'r', {}\n"
    spin += "    def step(self, a):\n        while True: pass\n"
    sessions = [pool.open(source), pool.open(spin)]
    assert sessions[1].reset().ok and sessions[1].step("x").error == "timeout"
    root = pool._launcher.dir
    procs = _descendants({w.proc.popen.pid for w in pool._live})
    assert len(procs) >= 4, "two sandboxes (runtime + worker processes) should be running before close()"
    pool.close()
    time.sleep(0.2)
    assert [p for p in procs if _alive(p)] == [] and not os.path.exists(root)
    assert sessions[0].reset().error == "unavailable"  # a session outliving its pool answers, it does not raise


def _descendants(roots: set[int]) -> set[int]:
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                parent[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                pass
    found, frontier = set(roots), set(roots)
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_auto_picks_the_strongest_working_level(caplog):
    caplog.set_level(logging.INFO, logger="spade_jax.sandbox")
    level = detect_level("auto")
    assert level in LEVELS
    if HAVE["gvisor"]:
        assert level == "gvisor", "runsc is installed and works on this machine"
    with HostPool(1, SandboxConfig(level="auto")) as pool:
        assert pool.level == level
    assert any(f"sandbox level {level}" in r.getMessage() for r in caplog.records)


def _cli(capsys, *argv: str) -> tuple[int, list]:
    code = cli_main(list(argv))
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_env_run_prints_transitions_as_json(capsys):
    path = str(ENVS / "counter_game.py")
    code, lines = _cli(capsys, "env-run", path, "--actions", "\\boxed{25}", "--actions", "\\boxed{9}",
                       "--seed", "3", "--sandbox", "process", "--hint", "--json")  # fmt: skip
    assert code == 0
    assert [r["event"] for r in lines] == ["load", "reset", "hint", "step", "step"]
    ref = _reference((ENVS / "counter_game.py").read_text(), 3, ["\\boxed{25}", "\\boxed{9}"], {})
    assert lines[1]["observation"] == ref[0][0] and lines[2]["hint"] == ref[1]
    step = lines[3]
    assert [step[k] for k in ("observation", "reward", "terminated", "truncated", "info")] == ref[2]


def test_env_run_reports_structured_failures(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class B:\n    def reset(self, seed=None):\n        return 'r', {}\n"
                   "    def step(self, a):\n        return 1 / 0\n")  # fmt: skip
    code, lines = _cli(
        capsys, "env-run", str(bad), "--actions", "x", "--actions", "y", "--sandbox", "process", "--json"
    )
    assert code == 1
    assert lines[-1]["event"] == "step" and lines[-1]["error"] == "exception"
    assert "ZeroDivisionError" in lines[-1]["message"] and "1 / 0" in lines[-1]["traceback"]
    assert len(lines) == 3  # stops at the failure
    bad.write_text("def broken(:\n")
    code, lines = _cli(capsys, "env-run", str(bad), "--sandbox", "process", "--json")
    assert code == 1 and lines[0]["error"] == "load_error"


def test_env_run_bad_input_is_one_line(capsys, tmp_path):
    assert cli_main(["env-run", str(tmp_path / "missing.py"), "--actions", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing.py" in err


@pytest.mark.parametrize("level", LEVEL_PARAMS)
def test_a_sandbox_started_by_a_thread_outlives_the_thread(level):
    """The rollout engine and the gates open sessions from worker threads that come and go. bwrap's
    --die-with-parent fires when the thread that started the sandbox exits; the sandbox started there must go
    on serving (one worker started in all) rather than die and fail the next environment's load()."""
    import threading

    source = (ENVS / "counter_game.py").read_text()
    with HostPool(num_workers=1, sandbox=SandboxConfig(level=level)) as pool:
        out: list = []

        def play() -> None:
            with pool.open(source) as s:
                out.append(s.reset(0).ok)

        t = threading.Thread(target=play)
        t.start()
        t.join()
        time.sleep(0.5)  # the kill a thread's exit sends takes effect within milliseconds
        with pool.open(source) as s:
            assert s.load_result.ok, s.load_result
            assert s.reset(0).ok
        assert out == [True]
        assert pool.stats["workers_started"] == 1, pool.stats
