"""Unbounded recursion with the recursion limit lifted (overflows the C stack)."""

import sys


class DeepRecursion:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        sys.setrecursionlimit(10**8)

        def f(n):
            return f(n + 1) + 1

        return str(f(0)), 0.0, False, False, {}
