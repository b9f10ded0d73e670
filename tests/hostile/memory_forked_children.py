"""Takes host memory past the per-process limit with forked children: step() forks `n` children (the per-uid
process limit allows 32), each filling `mb` MB of its own (under RLIMIT_AS) and sleeping, and reports how
many got there. Together they hold n x mb, far over what one episode may use; only a bound on the whole
sandbox stops it. `os` comes from `random._os` through a getattr helper, which the static gate cannot judge."""

import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


class MemoryForkedChildren:
    def __init__(self, max_turns=25, n=12, mb=96, **kw):
        self.max_turns, self.n, self.mb = max_turns, n, mb
        self.os = _reach(random, "_os")

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os = self.os
        r, w = os.pipe()
        for _ in range(self.n):
            if os.fork() == 0:
                try:
                    block = bytearray(self.mb << 20)
                    for i in range(0, len(block), 4096):
                        block[i] = 1
                    os.write(w, b"x")
                    while True:
                        os.read(r, 1)  # hold the memory until killed
                finally:
                    os._exit(0)
        got = 0
        try:
            while got < self.n:
                got += len(os.read(r, self.n))
        except OSError:
            pass
        return f"{got} children hold {got * self.mb} MB", 0.0, True, False, {"mb": got * self.mb}
