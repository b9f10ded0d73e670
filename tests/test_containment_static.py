"""Class 6 of issue 47: the static gate says what it guarantees, and the sandbox enforces the rest.

A. The one-line idioms that passed the static gate (a module rebound, a default argument, a container, getattr on
   a rebound name or as a value, chains through modules to sys and builtins, a dunder name by concatenation) are
   refused by it now: it is sound for what it claims (gates/static.py: no private or dunder attribute of an
   import-bound module or module chain, no module as a value, getattr only as a direct call).
B. The red team's complete programs (tests/hostile/static_*.py, which reached os.popen, os.system, exec + a
   subprocess and ctypes inside the sandbox) are refused by the gate; and loaded straight into a sandbox with no
   gate at all (what a route the gate cannot see would get), every capability is refused at run time, at the
   gVisor and bubblewrap levels, by the episode's audit hook and seccomp filter (sandbox/inside/guard.py): no
   command runs, no module outside the allow-list loads, no file outside the episode's directory is read or
   written, and blinding the hook (replacing builtins, os functions, a trace function, a lying str) changes none
   of it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spade_jax.gates.static import check_static

HOSTILE = Path(__file__).resolve().parent / "hostile"
LEVELS = [
    pytest.param("gvisor", marks=pytest.mark.skipif(not shutil.which("runsc"), reason="runsc (gVisor) not installed")),
    pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bwrap not installed")),
]
WRAP = """import random
import re
import functools
{imports}
from spade_jax.envs.base import GameEnv


def reach():
{body}


class E(GameEnv):
    def setup(self) -> str:
        return "Reply like \\\\boxed{{1}}."

    def play(self, command):
        return self.lose(str(reach()))
"""
IDIOMS = {
    "module attribute": ("", "return random._os"),
    "getattr on the module": ("", 'return getattr(random, "_os")'),
    "import as": ("import random as rr", "return rr._os"),
    "module rebound": ("", "r = random\n    return r._os"),
    "module as default argument": ("", "def f(m=random):\n        return m._os\n    return f()"),
    "module in a container": ("", "return (random,)[0]._os"),
    "getattr on a rebound name": ("", 'r = random\n    return getattr(r, "_os")'),
    "getattr as a value": ("", 'return functools.reduce(getattr, ["_os", "system"], random)'),
    "chain to sys": ("", 'return re.enum.sys.modules["os"]'),
    "chain to exec": ("", 're.enum.bltns.exec("x = 1", {})\n    return 1'),
    "chain to open": ("", 'return re.enum.bltns.open("/etc/hostname").read()'),
    "one level to sys": ("import typing", "return typing.sys"),
    "dunder by concatenation": ("", 'return getattr(reach, "_" * 2 + "globals" + "_" * 2)'),
    "dunder literal": ("", 'return getattr(reach, "__globals__")'),
}
PROGRAMS = ("static_alias_module", "static_default_arg", "static_chain", "static_getattr_concat")
# What each program's "pwn" step returns when the capability worked (the red team's evidence).
WORKED = ("uid=", "os.system ->", "exec ran subprocess", "ctypes loaded", "Linux", "bin")


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_the_static_gate_refuses_every_idiom(idiom):
    imports, body = IDIOMS[idiom]
    report = check_static(WRAP.format(imports=imports, body="    " + body))
    assert not report.ok, idiom


def test_ordinary_code_still_passes():
    """Module attributes, submodule chains to allowed modules, getattr with literal or computed names on objects."""
    body = (
        "xs = [math.sqrt(4), random.Random(1).random(), collections.abc.Mapping, re.compile('a')]\n"
        "    return getattr(xs, 'count')(1) + len(getattr(E, 'cmd_' + str(len(xs)), 'x'))"
    )
    report = check_static(WRAP.format(imports="import math\nimport collections", body="    " + body))
    assert report.ok, report.reason


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_red_teams_programs_are_refused_by_the_gate(name):
    assert not check_static((HOSTILE / f"{name}.py").read_text()).ok


@pytest.mark.sandbox
@pytest.mark.parametrize("level", LEVELS)
def test_what_no_gate_stops_is_refused_at_run_time(level):
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    with HostPool(num_workers=1, sandbox=SandboxConfig(level=level, call_timeout_s=5.0)) as pool:
        for name in (*PROGRAMS, "static_hook_tamper"):
            with pool.open((HOSTILE / f"{name}.py").read_text(), env_kwargs={"max_turns": 5}) as s:
                assert s.reset(1).ok, name
                r = s.step("\\boxed{pwn}")
            text = (r.value[0] if r.ok else r.message) or ""
            assert not any(mark in text for mark in WORKED), (name, text)
            if name == "static_hook_tamper":
                assert r.ok, r
                tried = dict(part.split("=") for part in text.split("tried: ", 1)[1].split(", "))
                refused = ("trace", "write outside", "write via liar", "read passwd", "import subprocess", "shell",
                           "fork")  # fmt: skip
                assert {k: tried[k] for k in refused} == dict.fromkeys(refused, "PermissionError"), tried
            else:
                assert not r.ok and "not allowed" in r.message, (name, r)
