"""Starves the other sessions of its sandbox of CPU without a process of its own (forking is refused): the first
step() starts `n` threads that hash large buffers in a loop (hashlib lets go of the interpreter lock while it
hashes, so the threads really run side by side) and answers at once; they spin until the session ends. A
neighbour's ordinary step() now waits for CPU and may run past its call timeout: that must never be charged to
the neighbour (its call is `unavailable`, not `timeout`), and the neighbour must not be retired for it.
`os` comes from `random._os` through a getattr on a parameter; hashlib and threading through the builtins'
import function."""

U = "_"


def _reach(holder, name):
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class ThreadSpinEnv:
    def __init__(self, max_turns=25, n=12, hold=0.3, turns=5, **kw):
        self.n, self.hold, self.turns, self.turn = n, hold, turns, 0

    def reset(self, seed=None):
        self.turn = 0
        return "Guess my number from 1 to 100. Reply like \\boxed{50}.", {}

    def step(self, action):
        self.turn += 1
        if self.turn == 1:
            hashlib, threading = _import("hashlib"), _import("threading")
            data = b"x" * (4 << 20)

            def spin():
                while True:
                    hashlib.sha256(data).digest()

            for _ in range(self.n):
                threading.Thread(target=spin, daemon=True).start()
        _import("time").sleep(self.hold)
        return "Higher.", 0.0, self.turn >= self.turns, False, {}
