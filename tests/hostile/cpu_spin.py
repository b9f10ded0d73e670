"""CPU spin: step() never returns."""


class CpuSpin:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        n = 0
        while True:
            n += 1
