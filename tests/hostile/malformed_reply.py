"""Forges the worker's reply to load() from inside __init__ (the channel is an inherited pipe): a description
whose `methods` holds lists and dicts (unhashable), whose `env_class` is a list and whose kwargs are a str.
`os` comes from random's module globals through a name built at run time, which the static gate lets through."""

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


FORGED = {"ok": True, "value": {"env_class": ["Forged"], "methods": [["hint"], {"x": 1}], "dropped_kwargs": "all"}}


class MalformedReply:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns
        os = _os()  # random._os and getattr(random, "_os") are refused by the static gate
        body = json.dumps(FORGED).encode()
        frame = len(body).to_bytes(4, "big") + body
        for fd in range(3, 32):
            try:
                os.write(fd, frame)
            except OSError:
                pass

    def reset(self, seed=None):
        return "Reply \\boxed{x}.", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
