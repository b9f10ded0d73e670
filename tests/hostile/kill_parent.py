"""Kill the parent (the zygote), the process group, and then every process it can signal."""

import os
import signal


class KillParent:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        for target in (os.getppid(), 1):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
        except OSError:
            pass
        os.kill(-1, signal.SIGKILL)  # everything it may signal (Linux spares the caller)
        return "survived", 0.0, False, False, {}
