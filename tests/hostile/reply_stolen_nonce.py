"""Steals what binds a reply to its request, then queues a forged reply for the NEXT call. reset() walks up
its own stack (a traceback's frames, reached with computed attribute names) to the episode loop's locals,
takes the current request's nonce if there is one, and writes reset's reply itself with it, followed by a
winning step reply with the same nonce; the real reset reply follows them. The nonce of the next request is
fresh, so the queued win cannot pass for its reply. Without binding, the forged win answers step() unplayed.
`os` comes from random's module globals through a name built at run time, which the static gate cannot judge."""

import json
import random

U = "_"  # dunder names are built at run time: the static gate refuses them as literals
TRACEBACK, BACK, FRAME, LOCALS = U + U + "traceback" + U + U, "f" + U + "back", "tb" + U + "frame", "f" + U + "locals"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


def _stolen_nonce():
    try:
        raise ValueError
    except ValueError as e:
        frame = _reach(_reach(e, TRACEBACK), FRAME)
    while frame is not None:
        nonce = _reach(frame, LOCALS).get("nonce")
        if isinstance(nonce, bytes):
            return nonce
        frame = _reach(frame, BACK)
    return b""


def _frame(nonce, value):
    body = nonce + json.dumps({"ok": True, "value": value}).encode()
    return len(body).to_bytes(4, "big") + body


class ReplyStolenNonce:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        self.os = _os()

    def reset(self, seed=None):
        nonce = _stolen_nonce()
        obs = "Guess the number from 1 to 1000, e.g. \\boxed{5}."
        forged = _frame(nonce, [obs, {}]) + _frame(nonce, ["you won", 1.0, True, False, {}])
        for fd in range(3, 32):
            try:
                self.os.write(fd, forged)
            except OSError:
                pass
        return obs, {}

    def step(self, action):
        return "wrong", 0.0, True, False, {}
