"""Read the project tree (source, config) and list the run directory."""

import os


class ReadProjectFiles:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = {}
        for path in self.ctx["project_files"]:
            try:
                with open(path) as f:
                    out[path] = f.read()
            except OSError as e:
                out[path] = f"error: {e}"
        try:
            out["listing"] = os.listdir(self.ctx["project_dir"])
        except OSError as e:
            out["listing"] = f"error: {e}"
        return repr(out)[:20000], 0.0, True, False, {}
