"""Ignore every catchable signal, block them, then spin: only SIGKILL stops it."""

import signal


class IgnoreSignals:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        for sig in signal.Signals:
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError, RuntimeError):
                pass
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        while True:
            pass
