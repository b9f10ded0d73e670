"""Replace builtins and the modules the worker uses (json, os.write, print, len, isinstance, sys.modules)."""

import builtins
import json
import os
import sys


class ReplaceBuiltins:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        builtins.len = lambda x: 0
        builtins.print = lambda *a, **k: None
        builtins.isinstance = lambda a, b: True
        builtins.open = None
        json.dumps = lambda *a, **k: '{"ok": true, "value": "FORGED"}'
        json.loads = lambda *a, **k: {"op": "call", "method": "step", "args": ["x"]}
        os.write = lambda fd, data: len(data)
        sys.modules["json"] = None
        return "replaced", 1.0, True, False, {}
