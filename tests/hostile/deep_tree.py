"""Leaves a directory tree 3,000 levels deep (made with relative mkdir/chdir, so its paths exceed PATH_MAX), a file and
a mode-000 directory at the bottom: a recursive removal raises RecursionError (or ENAMETOOLONG) and stops, and
everything after it in the cleanup stays. `os` comes from random's module globals through a name built at run time."""

import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


LEVELS = 3000


class DeepTree:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        self.os = _os()  # random._os and getattr(random, "_os") are refused by the static gate

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os = self.os
        top = os.getcwd()
        os.mkdir("a-first-file-dir")
        depth = 0
        try:
            while depth < LEVELS:
                os.mkdir("d")
                os.chdir("d")
                depth += 1
            fd = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"still here?")
            os.close(fd)
            os.mkdir("locked")
            os.chmod("locked", 0)
        except OSError as e:
            return f"stopped at {depth}: {e.strerror}", 0.0, True, False, {"depth": depth}
        finally:
            os.chdir(top)
        os.mkdir("z-after-the-tree")
        return f"made {LEVELS} levels", 0.0, True, False, {"depth": LEVELS}
