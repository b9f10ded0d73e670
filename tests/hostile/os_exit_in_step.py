"""os._exit() inside step(): no cleanup, no reply."""

import os


class OsExitInStep:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        os._exit(0)
