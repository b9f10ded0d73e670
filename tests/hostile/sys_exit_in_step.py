"""sys.exit() inside step()."""

import sys


class SysExitInStep:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        sys.exit(3)
