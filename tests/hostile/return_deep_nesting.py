"""A return value nested 100,000 levels deep (crashes naive encoders) and a self-referencing one."""


class ReturnDeepNesting:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        cyc = []
        cyc.append(cyc)
        return "ready", {"cycle": cyc}

    def step(self, action):
        v = []
        for _ in range(10**5):
            v = [v]
        return "deep", 0.0, False, False, {"v": v}
