"""Adversarial suite: every program in tests/hostile/ runs in a real sandbox (gvisor and bwrap levels).

For each one we check the concrete harm on the HOST did not happen (files unchanged, sockets never
reached, secrets never returned, no processes left over) and that the same one-worker pool then plays a
well-behaved episode correctly and finds no leftovers of the hostile one inside the sandbox.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import select
import shutil
import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spade_jax.sandbox import cgroups
from spade_jax.sandbox.host_pool import HostPool
from spade_jax.sandbox.launchers import SandboxConfig
from spade_jax.sandbox.pool_worker import host_grace_s

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HOSTILE = HERE / "hostile"
ENVS = HERE / "pool_envs"
# HOSTILE-MARKER-7f3a9c  <- a sandboxed read of this file would return this line
MARKER = "HOSTILE-MARKER-" + "7f3a9c"
ENV_SECRET = "env-secret-" + secrets.token_hex(8)
os.environ["SPADE_HOSTILE_ENV_SECRET"] = ENV_SECRET  # before any sandbox starts: must never leak inside

CALL_TIMEOUT = 1.5
CONFIG = dict(call_timeout_s=CALL_TIMEOUT, load_timeout_s=2.0, memory_mb=128, tmp_mb=32)
SESSIONS = 2  # places per worker: the sandbox bound (2 x 128 + 32 + 384 MB) stays below what the memory_* programs take
NO_CGROUP = cgroups.probe(SandboxConfig(**CONFIG).limits("bwrap"))  # why sandboxes get no cgroup here ('' if they do)

LEVELS = [
    pytest.param("gvisor", marks=pytest.mark.skipif(not shutil.which("runsc"), reason="runsc (gVisor) not installed")),
    pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap not installed")),
]


def _host_ipv4s() -> list[str]:
    ips = {"127.0.0.1"}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _, name in socket.if_nameindex():
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
            ips.add(socket.inet_ntoa(packed[20:24]))
        except OSError:
            pass
    s.close()
    return sorted(ips)


def _digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def host():
    """Host-side bait: listening sockets, a secret in the home dir, files whose bytes must not change."""
    tag = secrets.token_hex(6)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", 0))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(f"\0spade-hostile-{tag}")
    unix.listen(8)
    home_secret = Path.home() / f".spade-hostile-secret-{tag}"
    home_secret.write_text(f"TOP-SECRET-{tag}")
    watched = [
        REPO / "spade_jax" / "sandbox" / "inside" / "worker.py",
        REPO / "spade_jax" / "sandbox" / "inside" / "episode.py",
        REPO / "pyproject.toml",
        os.path.realpath(shutil.which("python3") or "/usr/bin/python3"),
    ]
    ctx = {
        "host_ips": _host_ipv4s(),
        "tcp_port": tcp.getsockname()[1],
        "udp_port": udp.getsockname()[1],
        "abstract_name": f"spade-hostile-{tag}",
        "home_secret": str(home_secret),
        "project_files": [str(REPO / "pyproject.toml"), __file__],
        "project_dir": str(REPO),
        "write_targets": [
            str(HOSTILE / f".pwned-{tag}"),
            str(Path.home() / f".pwned-{tag}"),
            f"/tmp/spade-pwned-{tag}",
            f"/usr/local/spade-pwned-{tag}",
        ],
        "victim_file": str(watched[0]),
        "host_pids": [os.getpid(), os.getppid()],
    }
    state = {"ctx": ctx, "tcp": tcp, "udp": udp, "unix": unix, "secret": f"TOP-SECRET-{tag}",
             "digests": {str(p): _digest(p) for p in watched}}  # fmt: skip
    yield state
    for s in (tcp, udp, unix):
        s.close()
    home_secret.unlink(missing_ok=True)
    for t in ctx["write_targets"]:
        Path(t).unlink(missing_ok=True)


@pytest.fixture(scope="module", params=LEVELS)
def pool(request):
    p = HostPool(num_workers=1, sandbox=SandboxConfig(level=request.param, **CONFIG), sessions_per_worker=SESSIONS)
    assert p.level == request.param
    yield p
    p.close()


def _uid_procs(uid: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("Uid:") and int(line.split()[1]) == uid:
                    out.append(int(pid))
    return out


def _assert_host_unharmed(pool: HostPool, host: dict) -> None:
    ctx = host["ctx"]
    for sock in (host["tcp"], host["unix"]):
        assert not select.select([sock], [], [], 0)[0], "a sandboxed program reached a host listening socket"
    host["udp"].setblocking(False)
    with pytest.raises(BlockingIOError):
        data = host["udp"].recv(100)
        pytest.fail(f"a sandboxed program sent a UDP datagram to the host: {data!r}")
    for target in ctx["write_targets"]:
        assert not os.path.exists(target), f"a sandboxed program wrote {target}"
    for path, digest in host["digests"].items():
        assert _digest(path) == digest, f"{path} changed"
    assert Path(ctx["home_secret"]).read_text() == host["secret"]


def _assert_pool_serves(pool: HostPool) -> dict:
    """A well-behaved episode in the same pool is correct, and finds no leftovers inside the sandbox; returns
    what the inspector saw."""
    from spade_jax.envs.base import GameEnv  # noqa: F401  (the in-process reference imports it too)

    src = (ENVS / "plain_walk.py").read_text()
    ref = _in_process(src, seed=11, actions=["left", "right"])
    with pool.open(src, env_kwargs={"max_turns": 10}) as s:
        assert s.load_result.ok, s.load_result
        got = [s.reset(11), s.step("left"), s.step("right")]
        assert all(r.ok for r in got), got
        assert [r.value for r in got] == ref
    with pool.open((ENVS / "inspector.py").read_text()) as s:
        assert s.reset().ok
        facts = s.step("look").value[4]
    assert facts["tmp"] == [], f"files of an earlier episode survived in tmp: {facts['tmp']}"
    assert facts["threads"] == 1
    assert facts["builtins_ok"] and facts["print_ok"] and facts["json_ok"] and facts["write_ok"]
    others = [p for p in facts["procs"] if p[0] not in (1, facts["me"]) and p[1] == facts["uid"]]
    assert others == [], f"processes of an earlier episode survived: {others}"
    assert facts["uid"] != 0
    if pool.level in ("bwrap", "process"):  # episode uids are real host uids here: nothing may linger
        time.sleep(0.05)
        assert len(_uid_procs(facts["uid"])) <= 1, "episode processes left on the host"  # 1: the next spare
    return facts


def _in_process(src: str, seed: int, actions: list[str]) -> list:
    ns: dict = {"__name__": "reference"}
    exec(compile(src, "reference", "exec"), ns)
    cls = next(v for v in ns.values() if isinstance(v, type) and hasattr(v, "step") and v.__module__ == "reference")
    env = cls(max_turns=10)
    out = [list(env.reset(seed=seed))] + [list(env.step(a)) for a in actions]
    return json.loads(json.dumps(out))


# ---------------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    file: str
    calls: list = field(default_factory=lambda: [("reset", 0), ("step", "go")])
    expect: set = field(default_factory=lambda: {"ok"})  # allowed outcomes of the LAST call
    check: object = None  # check(result, host) -> None, when the last call succeeded
    fail_check: object = None  # fail_check(result, host) -> None, when it failed
    after: object = None  # after(inspector_facts) -> None: what the next, well-behaved episode found


def _obs(r) -> str:
    return json.dumps(r.value) + r.message + r.traceback


def _no_secret(r, host):
    assert host["secret"] not in _obs(r)


def _no_project(r, host):
    text = _obs(r)
    assert MARKER not in text and "[build-system]" not in text


def _no_env_secret(r, host):
    assert ENV_SECRET not in _obs(r)


def _fs_view(r, host):
    listing = r.value[4]["listing"]
    assert not {"work", "etc", "home", "var"} & set(listing["/"]), listing["/"]
    assert isinstance(listing["/work"], str) and isinstance(listing["/etc"], str)
    # absent, or refused by the episode's guard (a listing outside what it may read)
    assert listing["/root"] in ([".pyenv"], "error: No such file or directory", "error: None"), listing["/root"]
    assert listing["/opt/spade"] == ["spade_jax"]


def _not_connected(r, host):
    assert "connected" not in r.value[0].replace("not connected", "")


def _flood_ok(r, host):
    assert r.value == ["still fine", 1.0, True, False, {"flooded": True}]


def _not_forged(r, host):
    assert r.ok is False or r.value != "FORGED"


def _is_systemexit(r, host):
    assert "SystemExit" in r.message


CONTROL_CHARS = ("\x1b", "\x07", "\r", "\x9b", "\x7f", "\u202e")


def _plain_utf8(r, host):
    """Every string the pool hands over encodes as UTF-8 (the tokenizer, SQLite and print need that)."""
    text = json.dumps(r.value, ensure_ascii=False) + r.message + r.traceback
    text.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
    assert "\ufffd" in text, "the surrogates were replaced, not dropped"


def _plain_failure(r, host):
    (r.message + r.traceback).encode("utf-8")
    assert "\ufffd" in r.message and r.message == " ".join(r.message.split())


def _names(*words):
    def check(r, host):
        assert all(w in r.message for w in words), r.message

    return check


def _escaped(r, host):
    text = r.message + r.traceback
    assert not [c for c in CONTROL_CHARS if c in text], ascii(text)
    assert "\\x1b[2J" in r.message and "all good" in r.message


def _attack_ran(key, at_least):
    def check(r, host):
        got = r.value[4][key]
        assert (len(got) if isinstance(got, list) else got) >= at_least, r.value

    return check


def _refused(r, host):
    """Contained before it ran: the episode's guard refused what the program needs (an import, a call)."""
    assert "not allowed in the sandbox" in r.message or "not readable in the sandbox" in r.message, r.message


def _tmp_free(facts):
    assert facts["tmp_free_mb"] >= 0.9 * facts["tmp_size_mb"], facts


CASES = [
    # a program that imports socket, subprocess or ctypes is refused at load (sandbox/inside/guard.py); the
    # sockets, processes and raw calls it would make are refused by the episode's seccomp filter too
    # (tests/test_containment_neighbours.py checks the filter with the kernel's own answers)
    Case("net_tcp_host", expect={"load_error"}, fail_check=_refused),
    Case("net_udp_host", expect={"load_error"}, fail_check=_refused),
    Case("net_abstract_unix", expect={"load_error"}, fail_check=_refused),
    Case("net_dns_external", expect={"load_error"}, fail_check=_refused),
    Case("read_home_secret", check=_no_secret),
    Case("read_project_files", check=_no_project),
    Case("read_host_environ", expect={"ok", "exception"}, check=_no_env_secret, fail_check=_refused),
    Case("list_filesystem", check=_fs_view),
    Case("write_outside_tmp"),
    Case("overwrite_existing"),
    Case("fork_bomb", expect={"timeout", "crashed", "exception", "memory"}),
    Case("memory_bomb", calls=[("reset", 0), ("step", "huge")], expect={"memory"}),
    Case("memory_bomb", calls=[("reset", 0), ("step", "grow")], expect={"memory"}),
    Case("cpu_spin", expect={"timeout"}),
    Case("sleep_forever", expect={"timeout"}),
    Case("stdout_flood", check=_flood_ok),
    Case("return_flood", expect={"bad_return", "memory"}),
    Case("return_deep_nesting", calls=[("reset", 0)], expect={"bad_return"}),
    Case("return_deep_nesting", calls=[("step", "x")], expect={"bad_return", "crashed", "memory"}),
    Case("non_serialisable", calls=[("reset", 0)], expect={"bad_return"}),
    Case("non_serialisable", calls=[("step", "nan")], expect={"bad_return"}),
    # a set is sent as a list sorted by repr (the paper's games put sets in info); other objects stay bad_return
    Case("non_serialisable", calls=[("step", "set")], check=lambda r, h: r.value[4] == {"s": [1, 2]}),
    Case("non_serialisable", calls=[("step", "gen")], expect={"bad_return"}),
    Case("kill_parent", expect={"ok", "crashed", "exception"}),  # kill(-1) spares the caller itself
    Case("kill_host_process"),
    Case("ignore_signals", expect={"timeout"}),
    Case("ctypes_crash", expect={"load_error"}, fail_check=_refused),
    Case("deep_recursion", expect={"crashed", "exception", "memory", "timeout"}),
    Case("threads_left_running"),
    Case("spawn_subprocesses", expect={"load_error"}, fail_check=_refused),
    Case("sys_exit_in_step", expect={"exception"}, check=_is_systemexit),
    Case("os_exit_in_step", expect={"crashed"}),
    Case(
        "replace_builtins",
        calls=[("reset", 0), ("step", "x"), ("step", "y")],
        expect={"ok", "bad_return", "crashed", "exception"},
        check=_not_forged,
    ),
    Case(
        "corrupt_channel",
        calls=[("reset", 0), ("step", "x"), ("step", "y")],
        expect={"ok", "bad_return", "crashed", "exception"},
    ),
    Case("file_size_bomb", expect={"exception"}),
    Case("fd_exhaustion", expect={"load_error"}, fail_check=_refused),
    Case("load_time_loop", calls=[], expect={"timeout"}),
    Case("privilege_escalation", expect={"load_error"}, fail_check=_refused),
    Case("exit_traps"),
    # one environment must never end the run: what crosses from the sandbox is plain, checked data
    Case("surrogate_observation", calls=[("reset", 0)], check=_plain_utf8),
    Case("surrogate_observation", calls=[("reset", 0), ("step", "\\boxed{5}")], check=_plain_utf8),
    Case("surrogate_exception", expect={"exception"}, fail_check=_plain_failure),
    Case(
        "huge_int_reward",
        calls=[("reset", 0), ("step", "go"), ("step", "go")],
        expect={"bad_return"},
        fail_check=_names("reward", "float"),
    ),
    Case(
        "poisoned_info",
        calls=[("reset", 0), ("step", "deep")],
        expect={"bad_return"},
        fail_check=_names("nested deeper"),
    ),
    Case("malformed_reply", calls=[], expect={"bad_return"}, fail_check=_names("load()", "nonce")),
    # replies are bound to their requests: a frame the episode writes itself is never taken as a reply
    Case("reply_ahead", calls=[("reset", 0)], expect={"bad_return"}, fail_check=_names("reset()", "nonce")),
    Case("reply_from_child", calls=[("reset", 0)], expect={"exception"}, fail_check=_names("os.fork", "not allowed")),
    Case(
        "reply_stolen_nonce",
        calls=[("reset", 0), ("step", "5")],
        expect={"bad_return"},
        fail_check=_names("step()", "between calls"),
    ),  # fmt: skip
    # memory outside the episode's own RLIMIT_AS is out of reach: no child process, no memfd, no SysV segment
    # (the episode's seccomp filter and guard), so the sandbox's shared bound is never where it fails
    Case("memory_forked_children", expect={"exception"}, fail_check=_names("os.fork", "not allowed")),
    Case("memory_memfd", check=lambda r, h: r.value[4]["mb"] == 0),
    Case("sysv_shm_fill", expect={"exception"}, fail_check=_refused),
    Case("sysv_shm_leave", expect={"exception"}, fail_check=_refused),
    Case("sysv_msg_leave", expect={"exception"}, fail_check=_refused),
    # namespaces, mounts and the kernel's big interfaces: ctypes is refused; beneath it the seccomp filter
    Case("userns_tmpfs", expect={"exception"}, fail_check=_refused),
    Case("clone_newuser", expect={"exception"}, fail_check=_refused),
    Case("kernel_surface", expect={"exception"}, fail_check=_refused),
    Case("terminal_escape", calls=[("reset", 0), ("step", "boom")], expect={"exception"}, fail_check=_escaped),
    # cleanup between episodes cannot be defeated by what the episode left
    Case("unreadable_dir", check=_attack_ran("made", 1), after=_tmp_free),
    Case("deep_tree", check=_attack_ran("depth", 3000), after=_tmp_free),
    Case("tmp_fill_then_leave", check=_attack_ran("mb", 8), after=_tmp_free),
]


# Hostile programs whose contained case lives in another test file (they attack the gates, the audit, the pool
# loader, the prompts or a neighbour session rather than the host): program -> the test file that contains them.
CONTAINED_ELSEWHERE = {
    "text_special_tokens": "test_containment_text.py",
    "neighbour_cpu_spin": "test_containment_neighbours.py",
    "neighbour_cpu_threads": "test_containment_neighbours.py",
    "neighbour_many_files": "test_containment_neighbours.py",
    "neighbour_memory_fork": "test_containment_neighbours.py",
    "neighbour_mqueue": "test_containment_neighbours.py",
    "neighbour_sysv_mode0": "test_containment_neighbours.py",
    "tell_crash": "test_containment_checkers.py",
    "tell_entropy": "test_containment_checkers.py",
    "tell_kind": "test_containment_checkers.py",
    "tell_latency": "test_containment_checkers.py",
    "tell_lower": "test_containment_checkers.py",
    "tell_prose": "test_containment_checkers.py",
    "tell_siblings": "test_containment_checkers.py",
    "hint_hidden_state": "test_containment_hints.py",
    "hint_in_observation": "test_containment_hints.py",
    "hint_leakcheck": "test_containment_hints.py",
    "hint_maxreward": "test_containment_hints.py",
    "hint_numberword": "test_containment_hints.py",
    "hint_quoted": "test_containment_hints.py",
    "hint_single_digit": "test_containment_hints.py",
    "hint_spelled": "test_containment_hints.py",
    "static_alias_module": "test_containment_static.py",
    "static_chain": "test_containment_static.py",
    "static_default_arg": "test_containment_static.py",
    "static_getattr_concat": "test_containment_static.py",
    "static_hook_tamper": "test_containment_static.py",
    "pool_layouts": "test_containment_pools.py",
}


def test_enough_hostile_programs():
    files = {p.stem for p in HOSTILE.glob("*.py")}
    assert len(files) >= 25
    here = {c.file for c in CASES}
    assert files == here | set(CONTAINED_ELSEWHERE), "every hostile program has a contained case and vice versa"
    assert not here & set(CONTAINED_ELSEWHERE)
    for program, test_file in CONTAINED_ELSEWHERE.items():  # the named test really plays that program
        assert program in (HERE / test_file).read_text(encoding="utf-8"), (program, test_file)


@pytest.mark.sandbox
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.file}-{c.calls[-1][1] if c.calls else 'load'}")
def test_hostile_program_is_contained(pool, host, case):
    if case.file in ("memory_forked_children", "memory_memfd", "sysv_shm_fill") and NO_CGROUP:
        pytest.skip(f"no per-sandbox memory bound on this host: {NO_CGROUP}")
    src = (HOSTILE / f"{case.file}.py").read_text()
    t0 = time.monotonic()
    session = pool.open(src, env_kwargs={"ctx": host["ctx"]})
    results = [session.load_result]
    for method, arg in case.calls:
        results.append(session.reset(arg) if method == "reset" else session.step(arg))
    session.close()
    elapsed = time.monotonic() - t0
    last = results[-1]
    outcome = "ok" if last.ok else last.error
    assert outcome in case.expect, f"{case.file}: got {last}"
    assert all(r.ok or r.error in (None, *case.expect, "crashed", "bad_return") for r in results)
    if outcome == "timeout":  # the per-call limit held: the zygote killed it, or the host killed the sandbox
        assert elapsed < 2.0 + 2 * (CALL_TIMEOUT + host_grace_s(CALL_TIMEOUT, SESSIONS > 1)), elapsed
    if last.ok and case.check:
        case.check(last, host)
    elif case.check and "ok" in case.expect and case.expect == {"ok"}:
        pytest.fail(f"{case.file}: expected ok, got {last}")
    if not last.ok and case.fail_check:
        case.fail_check(last, host)
    if outcome == "exception":
        assert last.traceback or last.message
    _assert_host_unharmed(pool, host)
    facts = _assert_pool_serves(pool)
    if case.after:
        case.after(facts)
    assert os.getpid() and pool.stats["sessions"] > 0
