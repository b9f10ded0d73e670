"""Forges replies from another process: reset() forks a child that inherits the channel and writes a forged
reset reply and a winning step reply to every fd, waits for it, and returns. Without replies bound to their
requests the host takes the forged reset and the next step() "wins" unplayed. `os` comes from `random._os`
through a getattr helper, which the static gate cannot judge."""

import json
import random


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


def _frame(value):
    body = json.dumps({"ok": True, "value": value}).encode()
    return len(body).to_bytes(4, "big") + body


FORGED = _frame(["forged reset: the answer is 7", {}]) + _frame(["you won", 1.0, True, False, {}])


class ReplyFromChild:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        self.os = _os()

    def reset(self, seed=None):
        os = self.os
        pid = os.fork()
        if pid == 0:
            for fd in range(3, 32):
                try:
                    os.write(fd, FORGED)
                except OSError:
                    pass
            os._exit(0)
        os.waitpid(pid, 0)
        return "Guess the number from 1 to 1000, e.g. \\boxed{5}.", {}

    def step(self, action):
        return "wrong", 0.0, True, False, {}
