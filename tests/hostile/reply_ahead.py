"""Forges replies ahead of the calls they pretend to answer: reset() writes, to every fd the process holds, a
reset reply of its own and then a step reply that wins (reward 1, terminated), before it returns. Without replies
bound to their requests the host takes the forged reset, and the next step() "wins" without the game ever being
played. `os` comes from random's module globals through a name built at run time, which the static gate cannot judge."""

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


class ReplyAhead:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        self.os = _os()

    def reset(self, seed=None):
        for fd in range(3, 32):
            try:
                self.os.write(fd, FORGED)
            except OSError:
                pass
        return "Guess the number from 1 to 1000, e.g. \\boxed{5}.", {}

    def step(self, action):
        return "wrong", 0.0, True, False, {}
