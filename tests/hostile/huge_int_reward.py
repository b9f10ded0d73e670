"""A reward of 10**400 (valid JSON, no float can hold it) on the terminal step, and huge ints in info: code
that calls float() on it raises OverflowError, which handlers written for TypeError/ValueError miss."""

HUGE = 10**400


class HugeIntReward:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turn = 0
        return "Reply \\boxed{go} twice.", {"score": HUGE}

    def step(self, action):
        self.turn += 1
        if self.turn < 2:
            return "Once more.", 0.0, False, False, {"score": -HUGE}
        return "Done.", HUGE, True, False, {"score": HUGE}
