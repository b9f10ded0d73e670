"""Write files outside the private tmp: into the project tree, the home dir, host /tmp, /usr."""


class WriteOutsideTmp:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = []
        for path in self.ctx["write_targets"]:
            try:
                with open(path, "w") as f:
                    f.write("PWNED")
                out.append(f"{path}: written")
            except OSError as e:
                out.append(f"{path}: {e.strerror}")
        return "; ".join(out), 0.0, True, False, {}
