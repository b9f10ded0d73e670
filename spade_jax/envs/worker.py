"""The environment worker: runs INSIDE the sandbox and serves one environment at a time to the host pool.

STANDARD LIBRARY ONLY, and nothing from spade_jax but its episode side (`spade_jax.envs.episode`) and cleanup
(`spade_jax.envs.cleanup`), both stdlib only too, and what environment code itself imports
(`spade_jax.envs.base`). Started as `python -S -s -B -c BOOT CONFIG_JSON` by `sandbox.py`.

Two kinds of process per sandbox:
  * the zygote (this module's `main`): trusted, never runs environment code. It owns the host channel
    (framed JSON on the original stdin/stdout, moved to private fds; fds 0/1 then point at /dev/null so
    prints cannot corrupt it), keeps common modules imported, and forks one *episode process* per session.
  * the episode process (`episode.EpisodeProcess`): drops to an unprivileged uid (two per worker, used in turn, so
    the next one can be forked while the current one runs without being reachable from it), applies the
    rlimits, loads the source in a fresh module, constructs the env and answers calls. The zygote relays each call,
    enforces the per-call deadline (SIGKILL), caps and validates the reply bytes (bound to its request by a
    fresh nonce; a frame written between calls is a forgery), and at the session's end
    kills every process of that uid and deletes its files in tmp and /dev/shm (`remove_tree`: no mode, depth
    or size of what it left stops it), before it answers the `end` request and within that call's timeout, so
    the next environment's load() never pays for it; a cleanup that does not finish makes the host replace the
    whole sandbox. Episodes sharing a worker therefore share nothing: replaced builtins, leftover threads,
    children and tmp files die with the session.

Requests it relays to the episode process: `load`, `call` (whitelisted env methods) and `leaks` (the hint
leak check, see episode.py); each under the same per-call deadline, so a hostile env cannot stall it.

Frame: 4-byte big-endian length, then UTF-8 JSON (host side: `spade_jax.envs.protocol`).
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import time

from spade_jax.envs.cleanup import _unshare_ipc, remove_ipc, remove_tree
from spade_jax.envs.episode import HEADER, NONCE_BYTES, EpisodeProcess, fail, recv_raw, send, write_all

ERRORS = ("timeout", "crashed", "memory", "bad_return", "exception", "load_error")
PRELOAD = (
    "random math re itertools collections json string dataclasses heapq functools fractions typing "
    "statistics enum copy inspect traceback linecache textwrap abc operator bisect decimal datetime "
    "resource types ctypes"
).split()
ENVELOPE_BYTES = 32768  # room for message + traceback on top of max_return_bytes


# ---------------------------------------------------------------------------------------------- zygote


class Zygote:
    """Trusted side of the sandbox: relays host requests to the current episode process.

    With two episode uids (A, B) the next episode process is forked while the current one loads, under
    the other uid, so it is ready at the next `load` and the hostile session cannot touch it.
    """

    def __init__(self, cfg: dict, rfd: int, wfd: int):
        self.cfg, self.rfd, self.wfd = cfg, rfd, wfd
        self.uids = cfg.get("uids") or [None]
        self.child: tuple | None = None  # (pid, to_child_fd, from_child_fd, uid)
        self.spare: tuple | None = None
        self.dead = "no environment is loaded"  # why the current session cannot answer
        self.dirty: set = set()  # uids whose processes and files must go before they are used again
        self.scratch = [cfg["tmp"]] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
        self.exits: dict[int, int] = {}  # exit statuses collected by reap(), by pid

    # episode processes -------------------------------------------------------------------------------
    def fork_episode(self, uid) -> tuple:
        gc.freeze()  # keep the collector off the zygote's objects: fewer copy-on-write page faults
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # episode process
            try:
                self.become_episode(to_r, from_w, uid)
            finally:
                os._exit(70)
        os.close(to_r)
        os.close(from_w)
        return pid, to_w, from_r, uid

    def become_episode(self, rfd: int, wfd: int, uid) -> None:
        import resource

        cfg = self.cfg
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        keep = sorted({0, 1, 2, rfd, wfd})
        for lo, hi in zip(keep, keep[1:] + [65536]):  # close the host channel and everything else
            os.closerange(lo + 1, hi)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        mb = 1 << 20
        limits = [
            (resource.RLIMIT_AS, cfg["memory_mb"] * mb),
            (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
            (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
            (resource.RLIMIT_FSIZE, cfg["max_file_mb"] * mb),
            (resource.RLIMIT_CORE, 0),
        ]
        if uid is not None:  # RLIMIT_NPROC counts per uid: only meaningful for a uid of our own
            limits.append((resource.RLIMIT_NPROC, cfg["max_processes"]))
        for which, value in limits:
            resource.setrlimit(which, (value, value + 2 if which == resource.RLIMIT_CPU else value))
        if cfg.get("ipcns"):
            _unshare_ipc()  # where allowed (gVisor), the episode's SysV objects die with its processes
        try:  # at the sandbox's memory bound the kernel kills episode processes first, never the zygote
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.chdir(cfg["tmp"])
        os.environ.update(TMPDIR=cfg["tmp"], HOME=cfg["tmp"])
        EpisodeProcess(cfg).serve(rfd, wfd)

    def other_uid(self):
        """The uid for the next episode process: not the current one's."""
        busy = {p[3] for p in (self.child, self.spare) if p}
        return next((u for u in self.uids if u not in busy), self.uids[0])

    def take_child(self) -> tuple:
        spare, self.spare = self.spare, None
        if spare is not None:
            try:
                if os.waitpid(spare[0], os.WNOHANG) == (0, 0):
                    return spare
            except ChildProcessError:
                pass
            self.close_fds(spare)
        self.cleanup()
        return self.fork_episode(self.other_uid())

    def close_fds(self, proc) -> None:
        for fd in proc[1:3]:
            try:
                os.close(fd)
            except OSError:
                pass

    def kill_child(self, why: str) -> str:
        """Kills the episode process; returns how it ended ('' when it was still running)."""
        child, self.child = self.child, None
        self.dead = why
        if child is None:
            return ""
        self.dirty.add(child[3])
        pid, status = child[0], self.exits.pop(child[0], None)
        for _ in range(0 if status is not None else 20 if why == "eof" else 1):  # usually exiting on EOF
            try:
                got, st = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if got:
                status = st
                break
            if why == "eof":
                time.sleep(0.005)
        if status is None:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass
        self.close_fds(child)
        return _describe(status)

    def cleanup(self, budget_s: float | None = None) -> bool:
        """After a session: no process of its uid survives, and its files in tmp and /dev/shm are gone.

        Bounded by `budget_s` (default: the call timeout); False when something survived it (the host then
        replaces the whole sandbox). Nothing the episode left can stop it: see `remove_tree`.
        """
        if not self.dirty:
            return True
        deadline = time.monotonic() + (budget_s if budget_s is not None else float(self.cfg["call_timeout_s"]))
        self.reap()
        clean = True
        for uid in sorted(self.dirty, key=str):
            clean = self.clean_uid(uid, deadline) and clean
        self.dirty.clear()
        return clean

    def clean_uid(self, uid, deadline: float) -> bool:
        """Kills `uid`'s processes and deletes its files until none is left (checked with a PID namespace)."""
        if uid is None:
            if self.cfg.get("ipcns"):
                remove_ipc(None)
            return all([remove_tree(d, deadline, keep_root=True) for d in self.scratch])
        pidns = self.cfg.get("pidns")
        if self.cfg.get("ipcns"):  # SysV objects are not seen by the checks below: one reaper pass removes them
            self.run_reaper(uid, deadline)
        for attempt in range(1000):  # with a PID namespace we can check that nothing is left, zombies included
            if pidns and not self.strays(uid) and not self.scratch_used():
                return True
            if time.monotonic() > deadline:
                return False
            self.run_reaper(uid, deadline)
            self.reap()
            if not pidns:
                return True
            time.sleep(min(0.001 * attempt, 0.02))
        return False

    def run_reaper(self, uid: int, deadline: float) -> None:
        """A process that becomes `uid`, kills all of its processes and deletes its files (until `deadline`)."""
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                for _ in range(3):  # zombies keep answering kill(): a few passes, not "until ESRCH"
                    try:
                        os.kill(-1, signal.SIGKILL)  # every process of this uid except ourselves
                    except ProcessLookupError:
                        break
                    time.sleep(0.001)
                for d in self.scratch:
                    remove_tree(d, deadline, keep_root=True)
                if self.cfg.get("ipcns"):
                    remove_ipc(uid)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    def reap(self) -> None:
        spare = self.spare[0] if self.spare else None
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == spare:
                self.close_fds(self.spare)
                self.spare = None
            self.exits[pid] = status

    def strays(self, uid: int) -> bool:
        """Whether any process of `uid` other than the spare is still in our PID namespace."""
        known = {p[0] for p in (self.spare, self.child) if p}
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in known:
                try:  # not the owner of /proc/<pid>: that is root for processes that changed uid
                    with open(f"/proc/{name}/status") as f:
                        if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f):
                            return True
                except (OSError, ValueError):
                    pass
        return False

    def scratch_used(self) -> bool:
        for d in self.scratch:
            try:
                with os.scandir(d) as it:
                    if any(True for _ in it):
                        return True
            except OSError:
                pass
        return False

    # requests ------------------------------------------------------------------------------------------
    def relay(self, msg: dict) -> bytes | dict:
        """Forwards one request to the episode process and returns its checked reply."""
        what = str(msg.get("method") or msg["op"]) + "()"
        load = msg["op"] == "load"
        if load:
            if self.child is not None:
                self.kill_child("replaced")
            self.cleanup()  # normally done at the last session's end; before the clock of this load starts
            try:
                self.child = self.take_child()
            except OSError as e:
                return fail("crashed", f"cannot start the episode process: {e}")
            self.dead = ""
        elif self.child is None:
            return fail("crashed", f"{what}: the episode process is gone ({self.dead})")
        _, to_fd, from_fd, _ = self.child
        limit = float(msg.get("timeout") or self.cfg["call_timeout_s"])
        deadline = time.monotonic() + limit
        if _wrote_between_calls(from_fd):
            self.kill_child(f"it wrote to its channel before {what}")
            return fail("bad_return", f"{what}: the episode wrote to its channel between calls (a forged reply)")
        nonce = os.urandom(NONCE_BYTES // 2).hex().encode()
        try:
            write_all(to_fd, HEADER.pack(len(nonce) + len(msg["_raw"])) + nonce + msg["_raw"])
            if load and len(self.uids) > 1 and self.spare is None:  # the other uid was cleaned above
                self.spare = self.fork_episode(self.other_uid())  # while the child loads
            body = recv_raw(from_fd, self.cfg["max_return_bytes"] + ENVELOPE_BYTES + NONCE_BYTES, deadline)
        except TimeoutError:
            self.kill_child(f"{what} timed out")
            return fail("timeout", f"{what} did not return within {limit:g} s (killed)")
        except ValueError as e:
            self.kill_child(f"{what} sent an oversized reply")
            return fail("bad_return", f"{what}: {e}")
        except OSError as e:  # EPIPE: it died before reading
            body = None
            if not isinstance(e, BrokenPipeError):
                return fail("crashed", f"{what}: channel error {e}")
        if body is None:
            how = self.kill_child("eof")
            self.dead = f"it died during {what}"
            if "CPU" in how:
                return fail("timeout", f"{what} exceeded the CPU-time limit ({self.cfg['cpu_seconds']} s)")
            return fail("crashed", f"{what}: the episode process died ({how or 'closed its channel'})")
        if body[:NONCE_BYTES] != nonce:
            self.kill_child(f"{what} sent a reply not bound to it")
            return fail("bad_return", f"{what}: a reply without this request's nonce (forged, or out of order)")
        body = body[NONCE_BYTES:]
        problem = _check_reply(body)
        if problem:
            self.kill_child(f"{what} sent a malformed reply")
            return fail("bad_return", f"{what}: {problem}")
        return body

    def end_session(self, budget_s: float) -> dict:
        """Ends the session and removes what it left BEFORE answering: the time that takes is charged to this
        session's close(), never to the next environment's load(). Cleanup that does not finish within
        `budget_s` is a failure, on which the host replaces the whole sandbox (a fresh /tmp)."""
        self.kill_child("the session ended")
        if self.cleanup(budget_s):
            return {"ok": True, "value": None}
        return fail("crashed", f"close(): what the session left survived {budget_s:g} s of cleanup")

    def serve(self) -> None:
        send(self.wfd, {"ok": True, "value": _facts(self.cfg)})
        while True:
            if self.child is None:  # between sessions: clean up and have the next process ready
                self.cleanup()
                if self.spare is None:
                    self.spare = self.fork_episode(self.other_uid())
            raw = recv_raw(self.rfd, self.cfg["max_request_bytes"])
            if raw is None:  # the host is gone: leave nothing behind (matters at the process level)
                self.kill_child("the host closed the channel")
                self.child, self.spare = self.spare, None
                self.kill_child("the host closed the channel")
                self.cleanup()
                return
            msg = json.loads(raw)
            op = msg.get("op")
            if op in ("load", "call", "leaks"):
                msg["_raw"] = raw
                reply = self.relay(msg)
            elif op == "end":
                reply = self.end_session(float(msg.get("timeout") or self.cfg["call_timeout_s"]))
            elif op == "ping":
                reply = {"ok": True, "value": _facts(self.cfg)}
            else:
                reply = fail("exception", f"unknown request {op!r}")
            send(self.wfd, reply) if isinstance(reply, dict) else write_all(self.wfd, HEADER.pack(len(reply)) + reply)


def _wrote_between_calls(fd: int) -> bool:
    """Whether the episode process wrote to its channel while no request was open (EOF is not writing: a
    process that died between calls is reported by the request itself)."""
    try:
        if not select.select([fd], [], [], 0)[0]:
            return False
        return bool(os.read(fd, 1))
    except OSError:
        return False


def _check_reply(body: bytes) -> str:
    """'' when `body` is a well-formed reply (checked here because the episode process is untrusted)."""

    def no_constants(name: str):
        raise ValueError(f"non-JSON number {name}")

    try:
        obj = json.loads(body, parse_constant=no_constants)
    except (ValueError, RecursionError) as e:
        return f"malformed reply from the episode process ({type(e).__name__})"
    if not isinstance(obj, dict) or not isinstance(obj.get("ok"), bool):
        return "malformed reply from the episode process"
    if not obj["ok"] and obj.get("error") not in ERRORS:
        return "malformed error reply from the episode process"
    return ""


def _describe(status: int | None) -> str:
    if status is None:
        return ""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = {signal.SIGXCPU: "CPU-time limit", signal.SIGSEGV: "segmentation fault"}.get(sig, "")
        try:
            sname = signal.Signals(sig).name
        except ValueError:
            sname = f"signal {sig}"
        return f"killed by {sname}" + (f", {name}" if name else "")
    return f"exited with status {os.WEXITSTATUS(status)}"


def _facts(cfg: dict) -> dict:
    return {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "uids": cfg.get("uids"),
        "base_importable": "spade_jax.envs.base" in sys.modules,
    }


def _take_channel() -> tuple[int, int]:
    """Moves the host channel off fds 0/1 (which then point at /dev/null)."""
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return rfd, wfd


def main(config_json: str) -> None:
    """Entry point inside the sandbox."""
    cfg = json.loads(config_json)
    rfd, wfd = _take_channel()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    import importlib

    for name in PRELOAD + ["spade_jax.envs.base"]:
        try:
            importlib.import_module(name)
        except Exception:  # base may be absent in a partial checkout: the env's own import will say so
            pass
    try:
        import site

        site.setquit()  # exit()/quit() as under a normal interpreter (we run with -S)
    except Exception:
        pass
    Zygote(cfg, rfd, wfd).serve()
