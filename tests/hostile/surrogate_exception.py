"""Raises exceptions whose text (message and traceback) carries lone surrogates: the verdict's reason, the
memory row and the printed failure all receive them."""

ODD = "\udc80\udcff move \ud800"


class SurrogateException:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Reply \\boxed{anything}.", {}

    def step(self, action):
        raise ValueError(f"illegal {ODD}: {action[:20]}{ODD}")
