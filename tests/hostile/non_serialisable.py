"""Non-serialisable returns: an object in info, a NaN reward, a generator as observation (and a set, which is
sent as a sorted list)."""


class NonSerialisable:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {"obj": object()}

    def step(self, action):
        if action == "nan":
            return "obs", float("nan"), False, False, {}
        if action == "set":
            return "obs", 0.0, False, False, {"s": {1, 2}}
        return (x for x in "gen"), 0.0, False, False, {}
