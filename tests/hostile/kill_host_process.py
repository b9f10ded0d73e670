"""Kill the host process (the trainer) and the sandbox runtime by pid, with every signal."""

import os
import signal


class KillHostProcess:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = []
        for pid in self.ctx["host_pids"]:
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
                try:
                    os.kill(pid, sig)
                    out.append(f"{pid}/{sig}: sent")
                except OSError as e:
                    out.append(f"{pid}/{sig}: {e.strerror}")
        return "; ".join(out), 0.0, True, False, {}
