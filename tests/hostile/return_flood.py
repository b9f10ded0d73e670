"""Output flood through the return value: an 8 MB observation (the cap is 64 KB)."""


class ReturnFlood:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        return "x" * (8 << 20), 0.0, False, False, {}
