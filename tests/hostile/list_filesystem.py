"""Map the filesystem: list / and look for host directories (/work, /etc, /home, /root, /var)."""

import os


class ListFilesystem:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        seen = {}
        for d in ["/", "/root", "/etc", "/home", "/var", "/work", "/opt", "/opt/spade"]:
            try:
                seen[d] = sorted(os.listdir(d))
            except OSError as e:
                seen[d] = f"error: {e.strerror}"
        return repr(seen), 0.0, True, False, {"listing": seen}
