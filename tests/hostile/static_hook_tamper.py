"""Past the static gate, against the run-time guard itself: before using a capability it tries to blind the
episode's audit hook (sandbox/inside/guard.py) by replacing what such a hook might call (the builtins any, len,
isinstance and type, os.getcwd, os.fsdecode, posixpath.normpath), by a trace function that could rewrite the
hook's locals, and by a str subclass that lies about its prefix; then it writes outside its directory, reads
/etc/passwd by a bytes path, imports subprocess and runs a shell. Every one must still be refused. `os` comes
from `random._os` and the builtins module through a function's globals, with computed dunder names."""

import random

from spade_jax.envs.base import GameEnv

U = "_"


def _reach(holder, name):
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


def _builtins():
    scope = _reach(_reach, U * 2 + "glo" + "bals" + U * 2)
    found = scope[U * 2 + "builtins" + U * 2]
    return found if not isinstance(found, dict) else type("B", (), found)


class Liar(str):
    def startswith(self, *a, **k):
        return True


class HookTamperEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "hook_tamper"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 100)
        return "Guess my number from 1 to 100. Reply like \\boxed{50}."

    def play(self, command):
        if command != "pwn":  # no checker sends this
            return self.win("Right.") if command == str(self.secret) else self.lose("Wrong.")
        os, done = _os(), {}
        b = _builtins()

        def attempt(name, fn):
            try:
                fn()
                done[name] = "ok"
            except Exception as e:
                done[name] = type(e).__name__

        attempt("blind any", lambda: setattr(b, "any", lambda *a: False))
        attempt("blind len", lambda: setattr(b, "len", lambda *a: 0))
        attempt("blind type", lambda: setattr(b, "type", lambda *a: str))
        attempt("blind getcwd", lambda: setattr(os, "getcwd", lambda: "/"))
        attempt("blind fsdecode", lambda: setattr(os, "fsdecode", lambda p: "/tmp/x"))
        attempt("trace", lambda: _reach(_os(), "sys").settrace(lambda *a: None))
        attempt("write outside", lambda: open("/tmp/../etc/pwned-by-env", "w").write("x"))
        attempt("write via liar", lambda: open(Liar("/etc/pwned-by-env-2"), "w").write("x"))
        attempt("read passwd", lambda: open(b"/etc/passwd", "rb").read())
        attempt("import subprocess", lambda: _reach(b, U * 2 + "import" + U * 2)("subprocess"))
        attempt("shell", lambda: os.system("id"))
        attempt("fork", lambda: os.fork())
        return self.lose("tried: " + ", ".join(f"{k}={v}" for k, v in done.items()))
