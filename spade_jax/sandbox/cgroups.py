"""Per-sandbox bounds on total memory and processes, from the host's cgroups (v2, or v1 memory + pids).

An episode's rlimits bind one process. Its forked children, memfd and tmpfs files, and SysV segments are
charged to the memory cgroup of the sandbox they run in, so a cgroup per sandbox bounds them all together; a
pids cgroup bounds how many processes (threads, for gVisor's host side) the sandbox may have. Each sandbox's
first process joins its cgroup before it execs the runtime (`wrap`: a `sh` that writes its own pid, so nothing
can start outside it), and the cgroup is removed when the sandbox is killed.

When the host gives no writable cgroup (no cgroupfs, read-only, no controller), `probe` says why in one line
and the launcher logs it loudly at start; the per-process rlimits still hold. Failures creating one sandbox's
cgroup raise `OSError` (the launcher then starts that sandbox without it and says so).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

MOUNT = Path("/sys/fs/cgroup")
_counter = itertools.count()


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one sandbox may use in all: `memory_mb` of RAM (swap included), `pids` processes/threads (None: no
    bound)."""

    memory_mb: int
    pids: int | None = None


def _own_path(controller: str) -> str:
    """This process's cgroup path for `controller` (v1) or in the unified tree ("": v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and names == ""):
            return path
    return "/"


def _parents() -> dict[str, Path] | None:
    """Where new cgroups go, by controller: {"memory": dir, "pids": dir} (v1) or {"": dir} (v2); None if neither
    layout is mounted."""
    if (MOUNT / "cgroup.controllers").is_file():  # v2: one unified tree
        return {"": MOUNT / _own_path("").lstrip("/")}
    if (MOUNT / "memory" / "memory.limit_in_bytes").is_file():
        out = {"memory": MOUNT / "memory" / _own_path("memory").lstrip("/")}
        if (MOUNT / "pids").is_dir():
            out["pids"] = MOUNT / "pids" / _own_path("pids").lstrip("/")
        return out
    return None


class Cgroup:
    """One sandbox's cgroup (a directory per v1 controller, or one v2 directory)."""

    def __init__(self, dirs: dict[str, Path], limits: Limits):
        self.dirs, self.limits = dirs, limits

    @classmethod
    def create(cls, limits: Limits, name: str | None = None) -> Cgroup:
        """Makes the cgroup and sets its limits; OSError (nothing left behind) when the host refuses."""
        parents = _parents()
        if parents is None:
            raise OSError("no cgroup filesystem at /sys/fs/cgroup")
        name = name or f"spade-sandbox-{os.getpid()}-{next(_counter)}"
        made: dict[str, Path] = {}
        try:
            for controller, parent in parents.items():
                d = parent / name
                d.mkdir()
                made[controller] = d
            cg = cls(made, limits)
            cg._set_limits()
            return cg
        except OSError:
            cls(made, limits).remove()
            raise

    def _set_limits(self) -> None:
        mem = str(self.limits.memory_mb << 20)
        if "" in self.dirs:  # v2
            d = self.dirs[""]
            (d / "memory.max").write_text(mem)
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            if self.limits.pids is not None and (d / "pids.max").exists():
                (d / "pids.max").write_text(str(self.limits.pids))
            return
        d = self.dirs["memory"]
        (d / "memory.limit_in_bytes").write_text(mem)
        if (d / "memory.memsw.limit_in_bytes").exists():  # swap counted too (only after the RAM limit is set)
            (d / "memory.memsw.limit_in_bytes").write_text(mem)
        if self.limits.pids is not None and "pids" in self.dirs:
            (self.dirs["pids"] / "pids.max").write_text(str(self.limits.pids))

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started by a shell that first moves itself into this cgroup (exit 125 if it cannot)."""
        procs = [str(d / "cgroup.procs") for d in self.dirs.values()]
        script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
        return ["/bin/sh", "-c", script, "spade-cgroup", str(len(procs)), *procs, *argv]

    def memory_events(self) -> tuple[int, int]:
        """(refusals, kills) at the memory bound so far: allocations the bound refused (reclaim of page cache
        counts too, so alone they prove nothing) and processes the kernel killed for it."""
        if "" in self.dirs:
            events = self.dirs[""] / "memory.events"
            return _field(events, "max"), _field(events, "oom_kill")
        d = self.dirs["memory"]
        try:
            failcnt = int((d / "memory.failcnt").read_text())
        except (OSError, ValueError):
            failcnt = 0
        return failcnt, _field(d / "memory.oom_control", "oom_kill")  # v1 (oom_kill: kernel >= 4.13)

    def pids_events(self) -> int:
        """How often so far a fork or thread creation in the sandbox was refused at its process bound."""
        d = self.dirs.get("pids") or self.dirs.get("")
        return _field(d / "pids.events", "max") if d is not None else 0

    def usage_mb(self) -> float:
        """The memory the sandbox uses now (MB; 0.0 when unreadable)."""
        d = self.dirs.get("memory") or self.dirs[""]
        for name in ("memory.usage_in_bytes", "memory.current"):
            try:
                return int((d / name).read_text()) / (1 << 20)
            except (OSError, ValueError):
                continue
        return 0.0

    def peak_mb(self) -> float:
        """The most memory the sandbox has used at once (MB)."""
        d = self.dirs.get("memory") or self.dirs[""]
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            try:
                return int((d / name).read_text()) / (1 << 20)
            except (OSError, ValueError):
                continue
        return 0.0

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kills whatever is still in the cgroup and removes its directories (best effort, bounded)."""
        deadline = time.monotonic() + timeout_s
        for d in self.dirs.values():
            while d.exists():
                try:
                    d.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    _kill_all(d)
                    time.sleep(0.01)


def _field(path: Path, key: str) -> int:
    """The integer `key` of a flat-keyed cgroup file; 0 when the file or key is absent."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return 0


def _kill_all(d: Path) -> None:
    try:
        pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def remove_stale() -> int:
    """Removes the cgroups of sandboxes whose process is gone (a run killed with -9 leaves them, empty);
    returns how many. Never raises."""
    removed = 0
    for parent in (_parents() or {}).values():
        try:
            names = [d.name for d in parent.iterdir() if d.name.startswith(("spade-sandbox-", "spade-probe-"))]
        except OSError:
            continue
        for name in names:
            pid = name.split("-")[2]
            if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                try:
                    (parent / name).rmdir()
                    removed += 1
                except OSError:
                    pass
    return removed


def probe(limits: Limits) -> str:
    """'' when a cgroup with `limits` can be made here (and is removed again), else why not, in one line."""
    try:
        Cgroup.create(limits, name=f"spade-probe-{os.getpid()}-{next(_counter)}").remove()
    except OSError as e:
        return f"cannot make a cgroup ({e.strerror or e})"
    return ""
