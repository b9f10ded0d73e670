"""Looks around the sandbox from inside an episode: leftovers of earlier episodes must be gone. What the sandbox
refuses to show it (another directory, other processes: sandbox/inside/guard.py) it reports as None."""

import builtins
import json
import os
import threading


class Inspector:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "inspect", {}

    def step(self, action):
        procs = []
        try:
            pids = os.listdir("/proc")
        except PermissionError:
            pids = ["self"]
        for pid in pids:
            if pid.isdigit() or pid == "self":
                try:
                    with open(f"/proc/{pid}/status") as f:
                        fields = dict(line.split(":", 1) for line in f if ":" in line)
                    uid, name = int(fields["Uid"].split()[0]), fields["Name"].strip()
                    procs.append([int(fields["Pid"]), uid, name, fields["State"].split()[0]])
                except (OSError, KeyError, ValueError):
                    pass
        tmp = os.environ.get("TMPDIR", "/tmp")  # the episode's own dir in the sandbox's tmp
        root = os.path.dirname(tmp)
        st = os.statvfs(tmp)
        facts = {
            "tmp_free_mb": st.f_bavail * st.f_frsize / 2**20,
            "tmp_size_mb": st.f_blocks * st.f_frsize / 2**20,
            "tmp": sorted(os.listdir(tmp)) + (_listing(root, tmp) or []),
            "tmp_others": _listing(root, tmp),
            "procs": procs,
            "me": os.getpid(),
            "uid": os.getuid(),
            "threads": threading.active_count(),
            "builtins_ok": len([1, 2, 3]) == 3 and isinstance(1, int) and builtins.open is open,
            "print_ok": repr(print) == "<built-in function print>",
            "json_ok": json.dumps({"a": 1}) == '{"a": 1}' and json.loads("[1]") == [1],
            "write_ok": os.write.__name__ == "write",
        }
        return "inspected", 0.0, True, False, facts


def _listing(root, mine):
    """What else is in the directory above the episode's own (None when the sandbox does not show it)."""
    try:
        return sorted(n for n in os.listdir(root) if os.path.join(root, n) != mine)
    except PermissionError:
        return None
