"""Output flood on stdout/stderr at every level (print, sys.__stdout__, raw fds 1 and 2) before a normal return."""

import os
import sys


class StdoutFlood:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        print("garbage\x00\xff" * 1000)
        return "ready", {}

    def step(self, action):
        chunk = "FLOOD" * 20000
        for _ in range(40):
            print(chunk)
            sys.__stdout__.write(chunk)
            sys.stderr.write(chunk)
            os.write(1, b"\x00\x00\x00\x10{not json}" * 1000)
            os.write(2, b"E" * 100000)
        return "still fine", 1.0, True, False, {"flooded": True}
