"""Read a secret file the host keeps in its home directory, and the host's shell/ssh files."""

import os


class ReadHomeSecret:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        found = {}
        for path in [self.ctx["home_secret"], "/root/.bash_history", "/root/.ssh/id_rsa", "/etc/shadow"]:
            try:
                with open(path) as f:
                    found[path] = f.read(4096)
            except OSError as e:
                found[path] = f"error: {e}"
        try:
            found["home"] = os.listdir(os.path.dirname(self.ctx["home_secret"]))
        except OSError as e:
            found["home"] = str(e)
        return repr(found), 0.0, True, False, {}
