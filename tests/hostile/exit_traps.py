"""Traps for the end of the session: atexit and signal handlers that hang, a __del__ that spins."""

import atexit
import signal
import time


class _Sticky:
    def __del__(self):
        while True:
            pass


class ExitTraps:
    def __init__(self, **kw):
        self.sticky = _Sticky()

    def reset(self, seed=None):
        atexit.register(lambda: time.sleep(10**9))
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *a: time.sleep(10**9))
        return "ready", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
