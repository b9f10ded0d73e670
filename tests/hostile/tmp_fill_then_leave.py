"""Fills the private tmp to its cap (files under a directory it then makes mode 000), and leaves a FIFO, a
symlink loop, a symlink to / and a directory whose name is not UTF-8: the next episode would find a full
tmp, and a cleanup that follows the symlink would delete the sandbox's own files."""

import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


CHUNK = b"x" * (1 << 20)


class TmpFillThenLeave:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        self.os = _os()  # random._os and getattr(random, "_os") are refused by the static gate

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os = self.os
        os.makedirs("hoard/sub", exist_ok=True)
        written, full = 0, False
        for i in range(12):  # 96 MB at most: past the 32-64 MB cap of the private tmp
            fd = os.open(f"hoard/sub/blob-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                for _ in range(8):
                    os.write(fd, CHUNK)
                    written += 1
            except OSError:  # ENOSPC: tmp is full (or EFBIG, the file-size limit)
                full = True
            finally:
                os.close(fd)
            if full:
                break
        os.chmod("hoard/sub", 0)
        os.chmod("hoard", 0)
        for make in (lambda: os.mkfifo("fifo"), lambda: os.symlink("loop", "loop"), lambda: os.symlink("/", "root"),
                     lambda: os.mkdir(b"bad-\xff-name")):  # fmt: skip
            try:
                make()
            except OSError:
                pass
        return f"wrote {written} MB", 0.0, True, False, {"mb": written}
