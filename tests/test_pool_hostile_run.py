"""One environment never ends the run, and cleanup between episodes cannot be defeated (issue 18).

The programs in tests/hostile/ named below pass the static gate, as a capable designer's would. Each one runs
through the paths a real run takes, at the gvisor and bwrap levels: the gates (`validate`, what the designer
and `spade-jax validate-env` call), the rollout engine with a scripted policy and the real tokenizer, the
memory's SQLite write and the CLI's printing. Each time the run goes on (a verdict or a discarded episode,
never an exception), the pool is not deadlocked, and the next well-behaved environment is served and not
blamed. `tests/test_pool_hostile.py` checks the same programs at the pool level (host unharmed, tmp empty).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from spade_jax.envs.contract import contract_examples
from spade_jax.gates.sandboxed import Verdict, validate
from spade_jax.gates.static import check_static
from spade_jax.sandbox import protocol
from spade_jax.sandbox.host_pool import CallResult, HostPool
from spade_jax.sandbox.inside.cleanup import remove_tree
from spade_jax.sandbox.launchers import SandboxConfig
from spade_jax.sandbox.replies import from_reply as _from_reply

HOSTILE = Path(__file__).resolve().parent / "hostile"
RUN_ENDERS = ("surrogate_observation", "surrogate_exception", "huge_int_reward", "poisoned_info", "malformed_reply",
              "terminal_escape")  # fmt: skip
CLEANUP_DEFEATERS = ("unreadable_dir", "deep_tree", "tmp_fill_then_leave")
REPLY_FORGERS = ("reply_ahead", "reply_from_child", "reply_stolen_nonce")
CONTROL_CHARS = ("\x1b", "\x07", "\r", "\x9b", "\x7f", "\u202e")
CONFIG = dict(call_timeout_s=1.5, load_timeout_s=2.0, memory_mb=128, tmp_mb=32)
GOOD = contract_examples()["game"]
DRIP = """
class Drip:
    def __init__(self, max_turns=25):
        self.turn = 0

    def reset(self, seed=None):
        self.turn = 0
        return "Say \\\\boxed{go} or \\\\boxed{stop}.", {}

    def step(self, action):
        self.turn += 1
        if "stop" in action:
            return "Stopped.", 0.5, True, False, {}
        return "Dripping.", 0.0, False, self.turn >= 3, {}
"""

LEVELS = [
    pytest.param("gvisor", marks=pytest.mark.skipif(not shutil.which("runsc"), reason="runsc (gVisor) not installed")),
    pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap not installed")),
]


def _source(name: str) -> str:
    return (HOSTILE / f"{name}.py").read_text()


def _plain(text: str) -> None:
    """`text` can go anywhere: valid UTF-8, no terminal control characters."""
    text.encode("utf-8")
    assert not [c for c in CONTROL_CHARS if c in text], ascii(text)


@pytest.fixture(scope="module", params=LEVELS)
def pool(request):
    p = HostPool(num_workers=2, sandbox=SandboxConfig(level=request.param, **CONFIG))
    assert p.level == request.param
    yield p
    p.close()


def _serves_within(pool: HostPool, seconds: float = 30.0) -> CallResult:
    """A well-behaved env's reset in `pool`, or a failure when the pool does not answer in time (deadlock)."""
    out: list = []

    def play() -> None:
        with pool.open(DRIP) as s:
            out.append(s.reset(0) if s.load_result.ok else s.load_result)

    t = threading.Thread(target=play, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"the pool did not serve a well-behaved env within {seconds} s (deadlock?)"
    return out[0]


# ------------------------------------------------------------------------------------ no sandbox needed


def test_every_new_program_passes_the_static_gate():
    for name in RUN_ENDERS + CLEANUP_DEFEATERS + REPLY_FORGERS:
        report = check_static(_source(name))
        assert report.ok, f"{name}: {report.reason}"


def test_the_reply_door_turns_what_an_episode_sends_into_checked_plain_data():
    odd = {"ok": True, "value": ["caf\udc80", {"k\ud800": ["\udcff"]}]}
    r = _from_reply(odd, "reset")
    assert r.ok and r.value == ["caf\ufffd", {"k\ufffd": ["\ufffd"]}]
    huge = _from_reply({"ok": True, "value": ["o", 10**400, True, False, {}]}, "step")
    assert huge.error == "bad_return" and "reward must be a finite float" in huge.message
    assert "401 digits" in huge.message and len(huge.message) < 200
    assert _from_reply({"ok": True, "value": ["o", 1, True, False, {}]}, "step").value[1] == 1.0
    for bad in (["o", True, True, False, {}], ["o", 0.0, 1, False, {}], ["o", 0.0, True, False, "info"], ["o"]):
        assert _from_reply({"ok": True, "value": bad}, "step").error == "bad_return", bad
    forged = {"ok": True, "value": {"env_class": ["X"], "methods": [["hint"]], "dropped_kwargs": "all"}}
    assert _from_reply(forged, "load").error == "bad_return"
    deep: list = []
    for _ in range(40):
        deep = [deep]
    assert "nested deeper" in _from_reply({"ok": True, "value": deep}, "metadata").message
    paint = {"ok": False, "error": "exception", "message": "\x1b[2J\x9bVALID\r\udc80", "traceback": "\x1b]52;c;x\x07"}
    fail = _from_reply(paint, "step")
    _plain(fail.message + fail.traceback)
    assert fail.error == "exception" and "\\x1b[2J" in fail.message
    # what no episode can have sent (the zygote checked its reply): the host's failure, nobody's fault
    assert _from_reply({"ok": False, "error": ["timeout"]}, "step").error == "unavailable"
    assert _from_reply("garbage", "step").error == "unavailable"


def test_printable_escapes_terminal_controls_and_keeps_text():
    assert protocol.printable("a\tb\nc é 😀") == "a\tb\nc é 😀"
    assert protocol.printable("\x1b[31mred\r\x07\x9b\u202e") == "\\x1b[31mred\\x0d\\x07\\x9b\\u202e"
    assert protocol.printable('{"a": "\x9b"}', json_escapes=True) == '{"a": "\\u009b"}'
    assert protocol.printable("\udc80") == "\ufffd"
    assert protocol.valid_text("ok") == "ok" and protocol.valid_text("\ud800x") == "\ufffdx"


def test_memory_stores_environment_text_with_lone_surrogates():
    from spade_jax.selfplay.memory import Memory

    memory = Memory(":memory:")
    rec = memory.record_attempt("class A: pass", kind="game", skill="s", step=0, valid=False, gate="step",
                                reason="step('x') raised ValueError: \udc80", name="A\ud800")  # fmt: skip
    assert memory.get(rec.id).verdict_reason == "step('x') raised ValueError: \ufffd"


def test_remove_tree_empties_what_a_recursive_removal_cannot(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("must survive")
    root = tmp_path / "scratch"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):  # deeper than the recursion limit, paths longer than PATH_MAX
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.mkdir("locked", dir_fd=fd)
    os.close(os.open("locked/file", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.chmod("locked", 0, dir_fd=fd)
    os.close(fd)
    (root / "vault").mkdir()
    (root / "vault" / "secret").write_text("x")
    os.chmod(root / "vault", 0)
    (root / "readonly").mkdir()
    (root / "readonly" / "pinned").write_text("x")
    os.chmod(root / "readonly", 0o500)
    os.symlink(outside, root / "link-out")
    os.symlink("loop", root / "loop")
    os.mkfifo(root / "fifo")
    assert remove_tree(str(root), keep_root=True)
    assert list(root.iterdir()) == [] and (outside / "keep").read_text() == "must survive"
    (root / "again").mkdir()
    (root / "again" / "f").write_text("x")
    assert remove_tree(str(root), deadline=0.0, keep_root=True) is False  # out of time: False, no exception
    assert remove_tree(str(root)) and not root.exists()
    assert remove_tree(str(tmp_path / "never-existed"))


def test_validate_turns_an_unexpected_error_into_a_verdict_and_closes_the_session():
    closed = []

    class Session:
        level, load_result = "fake", CallResult(True, {"env_class": "X", "methods": [], "dropped_kwargs": []})

        def reset(self, seed):
            raise RuntimeError("\x1b[2J boom")

        def close(self):
            closed.append(True)

    class Pool:
        def open(self, source, env_kwargs=None):
            return Session()

    verdict = validate(GOOD, Pool())
    assert not verdict.valid and verdict.gate == "internal" and "RuntimeError" in verdict.reason
    assert closed == [True]
    _plain(verdict.reason)


def test_a_cleanup_out_of_time_costs_only_its_own_session(tmp_path):
    """The zygote answers `end` once the session's uid is clean; out of budget, `end` answers all the same (the
    session is over: its neighbours and the sandbox go on) with the uid quarantined, not used again until a
    cleanup in the background gets it clean."""
    from spade_jax.sandbox.inside.worker import Cleaning, Zygote

    scratch = tmp_path / "tmp"
    (scratch / "a" / "b").mkdir(parents=True)
    (scratch / "a" / "b" / "f").write_text("x")
    z = Zygote({"uids": None, "tmp": str(scratch), "call_timeout_s": 1.0, "max_return_bytes": 1024}, -1, -1)
    z.scratch, z.reap = [str(scratch)], lambda: _reap_watched(z)  # only its own children: this is the test process
    replies: dict = {}
    z.reply = lambda rid, reply: replies.__setitem__(rid, reply)
    z.free.clear()  # the one uid (None: no uid switch) is the ended session's
    z.cleanings[None] = Cleaning(None, 0.0, 1)
    t0 = time.monotonic()
    while 1 not in replies and time.monotonic() < t0 + 10:
        z.reap()
        z.step_cleanings()
        time.sleep(0.005)
    assert replies[1]["ok"] is True and "cleanup" in replies[1]["value"]["quarantined"], replies
    assert z.free == [] and z.cleanings[None].quarantined  # out of use, still being cleaned
    _drive_cleanups(z)
    assert list(scratch.iterdir()) == [] and z.free == [None]


def _reap_watched(z) -> None:
    for pid in list(z.watched):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            z.exits[pid] = status


def _drive_cleanups(z) -> None:
    deadline = time.monotonic() + 20
    while z.cleanings and time.monotonic() < deadline:
        z.reap()
        z.step_cleanings()
        time.sleep(0.005)
    assert not z.cleanings


# -------------------------------------------------------------------------------------- through a sandbox


@pytest.mark.sandbox
@pytest.mark.parametrize("name", [n for n in RUN_ENDERS if n != "huge_int_reward"])  # that one: the rollouts
def test_gates_return_a_verdict_and_the_next_env_is_served(pool, name):
    verdict = validate(_source(name), pool)
    assert isinstance(verdict, Verdict)
    _plain(verdict.reason)
    json.dumps(verdict.to_dict(), ensure_ascii=False).encode("utf-8")
    if name in ("malformed_reply", "surrogate_exception", "terminal_escape"):
        assert not verdict.valid and verdict.gate in ("load", "step"), str(verdict)
    assert verdict.gate != "internal", str(verdict)  # a gate, not the validator, names the problem
    good = validate(GOOD, pool)
    assert good.valid, str(good)


@pytest.mark.sandbox
def test_a_forged_reply_never_wins_an_episode(pool, tokenizer):
    """The reply forgers queue a winning step reply before step() runs; in a rollout that episode is discarded
    as the environment's failure, never scored as a win, and the next environment is served."""
    from spade_jax.config.selfplay import RolloutConfig
    from spade_jax.selfplay.rollouts import EpisodeSpec, RolloutEngine, ScriptedPolicy

    specs = [EpisodeSpec(name, _source(name), 0, "no_hint") for name in REPLY_FORGERS]
    engine = RolloutEngine(pool, ScriptedPolicy(lambda req: "\\boxed{5}"), tokenizer, RolloutConfig(max_turns=2))
    try:
        result = engine.run(specs)
    finally:
        engine.close()
    for ep in result.episodes:  # the forger that needs a child process is refused the fork: its own exception
        want = "exception" if ep.spec.env_id == "reply_from_child" else "bad_return"
        assert ep.discarded and ep.error == want, (ep.spec.env_id, ep.end_reason, ep.episode_return)
    assert _serves_within(pool).ok


@pytest.mark.sandbox
def test_rollouts_go_on_and_release_every_worker(pool, tokenizer):
    from spade_jax.config.selfplay import RolloutConfig
    from spade_jax.selfplay.rollouts import EpisodeSpec, RolloutEngine, ScriptedPolicy

    specs = [EpisodeSpec(name, _source(name), 0, "no_hint") for name in RUN_ENDERS]
    specs += [EpisodeSpec("surrogate_hinted", _source("surrogate_observation"), 1, "hint", env_hint=True)]
    specs += [EpisodeSpec("drip", DRIP, 0, "no_hint")]

    def policy(req):
        return "\\boxed{stop}" if req.spec.env_id == "drip" and req.turn == 1 else "\\boxed{go}"

    engine = RolloutEngine(pool, ScriptedPolicy(policy), tokenizer, RolloutConfig(max_turns=4))
    try:
        result = engine.run(specs)
    finally:
        engine.close()
    eps = {e.spec.env_id: e for e in result.episodes}
    assert eps["drip"].end_reason == "terminated" and eps["drip"].episode_return == 0.5
    assert eps["huge_int_reward"].discarded and eps["huge_int_reward"].error == "bad_return"
    assert eps["malformed_reply"].discarded
    for name in ("surrogate_observation", "surrogate_hinted"):
        assert not eps[name].discarded, eps[name].messages[-1]
        text = json.dumps(eps[name].messages, ensure_ascii=False)
        text.encode("utf-8")
        assert "\ufffd" in text
    assert eps["surrogate_hinted"].hint and "\ufffd" in eps["surrogate_hinted"].hint
    assert eps["surrogate_exception"].error == "exception"
    eps["surrogate_exception"].messages[-1]["content"].encode("utf-8")
    assert _serves_within(pool).ok


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", CLEANUP_DEFEATERS)
def test_cleanup_is_bounded_and_never_charged_to_the_next_env(name, level):
    """A one-worker pool: the next env gets the same worker (or its replacement), loads within its own
    timeout and finds an empty tmp; the hostile session's close() is bounded."""
    import time

    # A roomy call timeout: 3,000 mkdir/chdir under gVisor took more than 1.5 s on a loaded machine; the bound
    # on close() below scales with it and still catches a cleanup that is not bounded
    config = dict(CONFIG, call_timeout_s=6.0)
    with HostPool(num_workers=1, sandbox=SandboxConfig(level=level, **config)) as p:
        s = p.open(_source(name))
        assert s.load_result.ok and s.reset(0).ok
        assert s.step("go").ok
        t0 = time.monotonic()
        s.close()
        assert time.monotonic() - t0 < 2 * (config["call_timeout_s"] + 2.0)
        with p.open((Path(__file__).parent / "pool_envs" / "inspector.py").read_text()) as nxt:
            assert nxt.load_result.ok, nxt.load_result  # its load() timeout did not pay for the cleanup
            assert nxt.reset().ok
            facts = nxt.step("look").value[4]
        assert facts["tmp"] == [], facts["tmp"]
        assert p.stats["error_timeout"] == 0 and p.stats["error_load_error"] == 0


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_cli_prints_environment_text_escaped(level, capsys, tmp_path):
    from spade_jax.cli import main

    src = tmp_path / "paint.py"
    src.write_text(_source("terminal_escape"))
    rc = main(["env-run", str(src), "--sandbox", level, "--hint", "--actions", "go"])
    out = capsys.readouterr().out
    assert rc == 0 and "\\x1b[2J" in out and "VALID" in out
    _plain(out.replace("\n", " "))
    rc = main(["env-run", str(src), "--sandbox", level, "--json", "--actions", "boom"])
    out = capsys.readouterr().out
    assert rc == 1 and [json.loads(line) for line in out.splitlines()]
    _plain(out.replace("\n", " "))
    rc = main(["validate-env", str(src), "--sandbox", level])
    out = capsys.readouterr().out
    assert rc == 1 and "INVALID" in out
    _plain(out.replace("\n", " "))
    odd = tmp_path / "odd.py"
    odd.write_text(_source("surrogate_exception"))
    rc = main(["validate-env", str(odd), "--sandbox", level])
    out = capsys.readouterr().out
    assert rc == 1 and "\ufffd" in out and "gate:   step" in out
    forged = tmp_path / "forged.py"
    forged.write_text(_source("malformed_reply"))
    assert main(["env-run", str(forged), "--sandbox", level]) == 1
    assert "FAILED bad_return" in capsys.readouterr().out
    assert main(["validate-env", str(forged), "--sandbox", level]) == 1
    assert "gate:   load" in capsys.readouterr().out
