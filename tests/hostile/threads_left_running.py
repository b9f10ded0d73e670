"""Leave threads running after step returns: they write to tmp and burn CPU forever."""

import os
import threading
import time


def _scribble():
    n = 0
    while True:
        n += 1
        try:
            with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "leftover-thread.txt"), "a") as f:
                f.write(f"{n}\n")
        except OSError:
            pass
        time.sleep(0.01)


def _spin():
    while True:
        pass


class ThreadsLeftRunning:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        for fn in (_scribble, _spin):
            threading.Thread(target=fn, daemon=False).start()
        return f"{threading.active_count()} threads", 0.0, True, False, {}
