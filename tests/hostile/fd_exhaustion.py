"""Open file descriptors until the process runs out."""

import os
import socket


class FdExhaustion:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        held = []
        try:
            while True:
                held.append(os.pipe())
                held.append(socket.socket())
        except OSError as e:
            return f"stopped after {len(held)}: {e.strerror}", 0.0, True, False, {"held": len(held)}
