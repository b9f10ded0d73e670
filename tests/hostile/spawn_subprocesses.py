"""Spawn detached subprocesses (new session, double fork) that outlive the episode."""

import os
import subprocess
import sys


class SpawnSubprocesses:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = []
        try:
            p = subprocess.Popen(["/bin/sh", "-c", "while :; do sleep 1; done"], start_new_session=True)
            out.append(f"sh {p.pid}")
        except OSError as e:
            out.append(f"sh: {e}")
        try:
            p = subprocess.Popen(
                [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"], start_new_session=True
            )
            out.append(f"python {p.pid}")
        except OSError as e:
            out.append(f"python: {e}")
        if os.fork() == 0:  # double fork: a daemon re-parented away from us
            os.setsid()
            if os.fork() == 0:
                while True:
                    pass
            os._exit(0)
        return "; ".join(out), 0.0, True, False, {}
