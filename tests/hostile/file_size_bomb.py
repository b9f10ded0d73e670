"""Fill the disk: one endless file in tmp, then many files."""

import os


class FileSizeBomb:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        chunk = b"\0" * (1 << 20)
        with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "big.bin"), "wb") as f:
            for _ in range(4096):
                f.write(chunk)
        return "wrote 4 GB", 0.0, True, False, {}
