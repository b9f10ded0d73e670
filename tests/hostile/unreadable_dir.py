"""Leaves directories the cleanup cannot list: a mode-000 vault with data in it, a write+search-only (0o333)
drop box whose known file the next episode (another uid) could read, a read-only (0o500) directory whose
file cannot be unlinked, and a 000 directory nested under another 000 one. `os` comes from `random._os`
through a getattr helper, which the static gate lets through."""

import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


class UnreadableDir:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        self.os = _os()  # random._os and getattr(random, "_os") are refused by the static gate

    def _write(self, path, data, mode=0o644):
        fd = self.os.open(path, self.os.O_WRONLY | self.os.O_CREAT, mode)
        self.os.write(fd, data)
        self.os.close(fd)

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os = self.os
        made = []
        for root in [".", "/dev/shm"]:
            try:
                os.makedirs(f"{root}/vault/inner", exist_ok=True)
                self._write(f"{root}/vault/inner/secret", b"left for the next episode")
                os.chmod(f"{root}/vault/inner", 0)
                os.chmod(f"{root}/vault", 0)
                os.makedirs(f"{root}/dropbox", exist_ok=True)
                self._write(f"{root}/dropbox/message", b"hello, next episode", 0o666)
                os.chmod(f"{root}/dropbox", 0o333)
                os.makedirs(f"{root}/readonly", exist_ok=True)
                self._write(f"{root}/readonly/pinned", b"cannot unlink me without write permission")
                os.chmod(f"{root}/readonly", 0o500)
                made.append(root)
            except OSError as e:
                made.append(f"{root}: {e.strerror}")
        return f"left {made}", 0.0, True, False, {"made": made}
