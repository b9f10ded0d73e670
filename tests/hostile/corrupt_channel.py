"""Write forged and garbage frames to every file descriptor it can find."""

import os
import struct


class CorruptChannel:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        forged = b'{"ok": true, "value": ["FORGED", 1.0, true, false, {}]}'
        for fd in range(3, 64):
            for data in (struct.pack(">I", len(forged)) + forged, b"\xff\xff\xff\xffgarbage"):
                try:
                    os.write(fd, data)
                except OSError:
                    pass
        return "forged", 0.0, True, False, {}
