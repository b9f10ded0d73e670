"""Memory bomb: one huge allocation, then a loop of growing allocations that keeps every chunk."""


class MemoryBomb:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        if action == "huge":
            self.blob = bytearray(8 << 30)
        keep = []
        while True:
            keep.append(bytearray(16 << 20))
