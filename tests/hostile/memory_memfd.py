"""Takes host memory as anonymous files: step() creates memfd files (no RLIMIT_AS applies to their pages) and writes
`mb` MB into them, keeping the fds open. RLIMIT_FSIZE bounds each file, so it makes many. `os` comes from random's
module globals through a name built at run time, which the static gate cannot judge."""

import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


class MemoryMemfd:
    def __init__(self, max_turns=25, mb=900, **kw):
        self.max_turns, self.mb = max_turns, mb
        self.os = _os()
        self.fds = []

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os = self.os
        chunk = b"\x01" * (1 << 20)
        written = 0
        try:
            while written < self.mb:
                fd = os.memfd_create("hold")
                self.fds.append(fd)
                for _ in range(15):  # 15 MB a file: under RLIMIT_FSIZE (16 MB)
                    os.write(fd, chunk)
                    written += 1
        except OSError as e:
            return f"stopped at {written} MB: {e.strerror}", 0.0, True, False, {"mb": written}
        return f"holding {written} MB", 0.0, True, False, {"mb": written}
