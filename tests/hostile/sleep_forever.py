"""Sleep forever in step() (blocked in a syscall, not burning CPU: only a wall clock catches it)."""

import time


class SleepForever:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        time.sleep(10**9)
