"""Takes host memory past the per-process limit with forked children: step() forks `n` children (the per-uid process
limit allows 32), each filling `mb` MB of its own in pieces (under RLIMIT_AS), saying how much it got and then
holding it, and reports what they got. Together they would hold n x mb, far over what one episode may use; only a
bound on the whole sandbox stops it. `os` comes from random's module globals through a name built at run time, which
the static gate cannot judge."""

import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


class MemoryForkedChildren:
    def __init__(self, max_turns=25, n=16, mb=64, **kw):
        self.max_turns, self.n, self.mb = max_turns, n, mb
        self.os = _os()

    def reset(self, seed=None):
        return "ready", {}

    def _child(self, r, w, hold):
        os, held, got = self.os, [], 0
        os.close(r)
        try:
            while got < self.mb:
                piece = bytearray(16 << 20)
                for i in range(0, len(piece), 4096):
                    piece[i] = 1
                held.append(piece)
                got += 16
        except MemoryError:
            pass
        os.write(w, bytes([got // 4]))
        os.close(w)  # once every child has written (or died), the parent reads EOF
        os.read(hold, 1)  # holds the memory: the parent keeps the other end and never writes

    def step(self, action):
        os = self.os
        r, w = os.pipe()
        hold, self.keep = os.pipe()
        for _ in range(self.n):
            if os.fork() == 0:
                try:
                    self._child(r, w, hold)
                finally:
                    os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 64):
            data += chunk
        total = 4 * sum(data)
        return f"{len(data)} children hold {total} MB", 0.0, True, False, {"mb": total}
