"""Segfault the interpreter through ctypes."""

import ctypes


class CtypesCrash:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes.memset(8, 0, 64)  # write to an unmapped address: SIGSEGV
        return "unreachable", 0.0, False, False, {}
