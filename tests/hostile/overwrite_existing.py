"""Overwrite an existing host file and the sandbox's own worker code (read-only mounts)."""

import os


class OverwriteExisting:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = []
        envs = "/opt/spade/spade_jax/envs"
        targets = [self.ctx["victim_file"], f"{envs}/worker.py", f"{envs}/episode.py", "/usr/bin/python3"]
        for path in targets:
            for how in ("w", "a"):
                try:
                    with open(path, how) as f:
                        f.write("PWNED")
                    out.append(f"{path} {how}: ok")
                except OSError as e:
                    out.append(f"{path} {how}: {e.strerror}")
            try:
                os.chmod(path, 0o777)
                os.unlink(path)
                out.append(f"{path}: unlinked")
            except OSError as e:
                out.append(f"{path} unlink: {e.strerror}")
        return "; ".join(out), 0.0, True, False, {}
