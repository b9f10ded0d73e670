"""The environment worker: runs INSIDE the sandbox and serves several sessions at once to the host pool.

STANDARD LIBRARY ONLY, and nothing from spade_jax but the rest of `sandbox/inside/` (the episode side,
`episode.py`; the processes it makes, `procs.py`; cleanup, `cleanup.py`) and what environment code itself
imports (`spade_jax.envs.base`), all standard library only too (tests/test_layering.py checks both). Started as
`python -S -s -B -c BOOT CONFIG_JSON` by `sandbox/launchers.py`.

Processes in one sandbox:
  * the zygote (this module's `main`): trusted, never runs environment code. It owns the host channel (framed
    JSON on the original stdin/stdout, moved to private fds; fds 0/1 then point at /dev/null so prints cannot
    corrupt it), keeps common modules imported, and forks one *episode process* per session. It is one event loop
    (`select`) over the host channel and the pipes of every live episode: each request names its session (`sid`)
    and carries a request id (`rid`); each reply goes back tagged with that `rid`, in whatever order the episodes
    answer. Nothing an episode does can block the loop: its reply is gathered without blocking (`Inbox`), its
    request written without blocking, its deadline kept by the loop (SIGKILL of that episode alone). A session
    that hangs, floods, forks or dies costs the others nothing.
  * the episode processes (`worker_procs.fork_episode`): one per session, each under a uid of its own from the
    worker's set (K + 1 uids for K sessions: one for the spare forked ahead, so a load does not wait for a fork);
    no two live sessions share a uid, so one cannot signal, ptrace or read /proc of another, nor its files (umask
    077, a private 0700 directory as cwd, TMPDIR and HOME). Without a uid switch (uids None: the sandbox cannot
    give one) the host puts one session on the worker.
  * reapers (`worker_procs.fork_reaper`): at a session's end one runs as its uid, kills every process of that uid
    and deletes the files that uid owns in tmp and /dev/shm and its SysV objects, again and again until nothing of
    the uid is left (with a PID namespace: checked, zombies included) or the `end` call's budget is spent. Only then
    does `end` answer and the uid go back to the free set, so the next load never pays for it; the other sessions
    are served meanwhile. A cleanup that does not finish makes the host replace the whole sandbox. Episodes sharing
    a worker over time therefore share nothing: replaced builtins, leftover threads, children and tmp files die
    with their session.

Requests it relays to an episode process: `load`, `call` (whitelisted env methods) and `leaks` (the hint leak
check, see episode.py), each under its own deadline. Every request to an episode starts with a fresh nonce its
reply must carry, and a frame the episode writes between calls is a forgery (the episode is killed, the call is
`bad_return`): an episode cannot queue a forged reply for a later call. Its own requests: `end`, `ping`.

Frame: 4-byte big-endian length, then UTF-8 JSON (host side: `spade_jax.sandbox.protocol`); replies to the host are
`{"rid": N, "reply": {...}}` (the ready frame alone is a bare reply).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

from spade_jax.sandbox.inside import guard
from spade_jax.sandbox.inside.episode import HEADER, NONCE_BYTES, fail, recv_raw, send, write_all
from spade_jax.sandbox.inside.procs import (
    NO_UID,
    Call,
    Cleaning,
    EpisodeProc,
    Inbox,
    Slot,
    describe,
    fork_episode,
    fork_reaper,
    owned_entries,
    uid_processes,
)

ERRORS = ("timeout", "crashed", "memory", "bad_return", "exception", "load_error", "unavailable")
# What an episode process may say about itself; "timeout", "crashed" and "unavailable" are the zygote's word (an
# episode claiming one, to pass its own failure off as the host's, sends a malformed reply: `bad_return`).
EPISODE_ERRORS = ("memory", "bad_return", "exception", "load_error")
STARVED_SHARE = 0.5  # a call that got less CPU than this share of its time limit, while runnable, was starved
PRELOAD = (
    "random math re itertools collections json string dataclasses heapq functools fractions typing "
    "statistics enum copy inspect traceback linecache textwrap abc operator bisect decimal datetime "
    "resource types ctypes"
).split()
ENVELOPE_BYTES = 32768  # room for message + traceback on top of max_return_bytes
QUARANTINE_S = 600.0  # how long a uid whose cleanup overran is cleaned on in the background
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
REAPER_POLL_S = 0.005  # how often the loop looks for a finished reaper while one runs


class _HostGone(Exception):
    """The host closed the channel (or it broke): the zygote ends every session and exits."""


# ---------------------------------------------------------------------------------------------- zygote


class Zygote:
    """Trusted side of the sandbox: one event loop relaying host requests to the sessions' episode processes."""

    def __init__(self, cfg: dict, rfd: int, wfd: int):
        self.cfg, self.rfd, self.wfd = cfg, rfd, wfd
        # private tmpfs per episode where a mount namespace really is private (guard.private_mounts_work); else
        # (gVisor's shared mount table) a tmpfs per uid that the zygote drops and makes afresh after each session
        cfg["mounts"] = bool(cfg.get("isolate")) and guard.private_mounts_work(cfg["tmp"])
        uids = [u for u in cfg.get("uids") or [] if u is not None]
        cfg["homes"] = bool(cfg.get("isolate") and not cfg["mounts"] and uids) and all(
            [guard.fresh_home(cfg["tmp"], u, cfg["tmp_mb"]) for u in uids]
        )
        self.free: list = list(cfg.get("uids") or [None])  # uids that are clean and unused
        self.sessions: dict = {}  # sid -> Slot
        self.spare: EpisodeProc | None = None
        self.spare_retry_at = 0.0
        self.cleanings: dict = {}  # uid -> Cleaning
        self.watched: set[int] = set()  # pids whose exit status we keep (episodes, reapers)
        self.exits: dict[int, int] = {}  # their statuses, collected by reap()
        self.scratch = [cfg["tmp"]] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
        self.reply_limit = cfg["max_return_bytes"] + ENVELOPE_BYTES + NONCE_BYTES

    # the loop ----------------------------------------------------------------------------------------
    def serve(self) -> None:
        send(self.wfd, {"ok": True, "value": _facts(self.cfg)})
        try:
            while True:
                self.turn()
        except _HostGone:
            self.shutdown()

    def turn(self) -> None:
        """One pass of the loop: children reaped, cleanups moved on, a spare ready, then whatever is ready."""
        self.reap()
        self.step_cleanings()
        self.ensure_spare()
        live = [s for s in self.sessions.values() if s.proc is not None]
        readers = {s.proc.from_fd: s for s in live if s.call is not None}
        writers = {s.proc.to_fd: s for s in live if len(s.outbox)}
        ready_r, ready_w, _ = select.select([self.rfd, *readers], list(writers), [], self.wait_s())
        for fd in ready_w:
            slot = writers[fd]
            if slot.proc is not None and slot.proc.to_fd == fd:
                self.flush(slot)
        for fd in ready_r:
            slot = readers.get(fd)
            if slot is not None and slot.proc is not None and slot.proc.from_fd == fd and slot.call is not None:
                self.on_readable(slot)
        if self.rfd in ready_r:
            self.on_request()
        self.expire()

    def wait_s(self) -> float | None:
        """How long select may sleep: until the nearest deadline, retry or reaper poll (None: no timer)."""
        now = time.monotonic()
        times = [s.call.deadline for s in self.sessions.values() if s.call is not None]
        for c in self.cleanings.values():
            times += [c.deadline, now + REAPER_POLL_S if c.reaper is not None else c.next_at]
        if self.spare is None and self.free:
            times.append(self.spare_retry_at)
        return max(0.0, min(times) - now) if times else None

    def reply(self, rid: object, reply: dict | bytes) -> None:
        """Sends one reply to the host, tagged with its request id; `reply` is a dict or checked JSON bytes."""
        body = reply if isinstance(reply, bytes) else json.dumps(reply, separators=(",", ":")).encode()
        tag = rid if isinstance(rid, int) and not isinstance(rid, bool) else 0
        frame = b'{"rid":%d,"reply":' % tag + body + b"}"
        try:
            write_all(self.wfd, HEADER.pack(len(frame)) + frame)
        except OSError:
            raise _HostGone from None

    # host requests -------------------------------------------------------------------------------------
    def on_request(self) -> None:
        try:
            raw = recv_raw(self.rfd, self.cfg["max_request_bytes"])
        except (OSError, ValueError):
            raw = None
        if raw is None:  # the host is gone: leave nothing behind (matters at the process level)
            raise _HostGone
        msg = json.loads(raw)
        op, rid = msg.get("op"), msg.get("rid")
        if op == "load":
            self.load(msg, raw)
        elif op in ("call", "leaks"):
            self.begin(self.sessions.get(msg.get("sid")), msg, raw)
        elif op == "end":
            self.end(msg)
        elif op == "ping":
            self.reply(rid, {"ok": True, "value": _facts(self.cfg)})
        else:
            self.reply(rid, fail("exception", f"unknown request {op!r}"))

    def load(self, msg: dict, raw: bytes) -> None:
        """A new session: the spare (or a fresh episode process) takes the load request."""
        sid, rid = msg.get("sid"), msg.get("rid")
        if sid in self.sessions:
            self.reply(rid, fail("unavailable", f"load(): session {sid!r} is already open"))
            return
        slot = self.sessions[sid] = Slot(sid)
        try:
            slot.proc = self.take_spare()
        except OSError as e:
            slot.dead = f"it could not start ({e})"
            self.reply(rid, fail("unavailable", f"cannot start the episode process: {e}"))
            return
        slot.uid, slot.dead = slot.proc.uid, ""
        self.begin(slot, msg, raw)

    def begin(self, slot: Slot | None, msg: dict, raw: bytes) -> None:
        """Sends one request to the session's episode process, bound to a fresh nonce; the reply comes later."""
        rid, what = msg.get("rid"), str(msg.get("method") or msg["op"]) + "()"
        if slot is None:
            self.reply(rid, fail("unavailable", f"{what}: no such session"))
            return
        if slot.proc is None:
            self.reply(rid, fail("crashed", f"{what}: the episode process is gone ({slot.dead})"))
            return
        if slot.call is not None:
            self.reply(rid, fail("unavailable", f"{what}: the session's previous call has not returned"))
            return
        if self.wrote_between_calls(slot):
            self.kill_child(slot, f"it wrote to its channel before {what}")
            why = "the episode wrote to its channel between calls (a forged reply)"
            self.reply(rid, fail("bad_return", f"{what}: {why}"))
            return
        nonce = os.urandom(NONCE_BYTES // 2).hex().encode()
        slot.outbox = memoryview(HEADER.pack(len(nonce) + len(raw)) + nonce + raw)
        slot.call = Call(rid, nonce, float(msg.get("timeout") or self.cfg["call_timeout_s"]), what)
        slot.call.cpu0 = cpu_state(slot.proc.pid)[1]
        slot.call.others0 = {s.proc.pid: cpu_state(s.proc.pid)[1] for s in self.sessions.values()
                             if s is not slot and s.proc is not None}  # fmt: skip
        self.flush(slot)

    def end(self, msg: dict) -> None:
        """Ends a session: its episode process is killed now, and `end` answers once its uid is clean."""
        rid, budget = msg.get("rid"), float(msg.get("timeout") or self.cfg["call_timeout_s"])
        slot = self.sessions.pop(msg.get("sid"), None)
        if slot is None:
            self.reply(rid, {"ok": True, "value": None})
            return
        slot.call = None
        self.kill_child(slot, "the session ended")
        if slot.uid is NO_UID:
            self.reply(rid, {"ok": True, "value": None})
            return
        self.cleanings[slot.uid] = Cleaning(slot.uid, budget, rid)

    # one session's channel ---------------------------------------------------------------------------
    def flush(self, slot: Slot) -> None:
        """Writes what the pipe takes of the pending request; a dead reader is the episode's death."""
        try:
            n = os.write(slot.proc.to_fd, slot.outbox)
        except BlockingIOError:
            return
        except OSError:  # EPIPE: it died before reading
            self.child_died(slot)
            return
        slot.outbox = slot.outbox[n:]

    def on_readable(self, slot: Slot) -> None:
        call = slot.call
        if not slot.inbox.fill(slot.proc.from_fd):
            self.child_died(slot)
            return
        try:
            body = slot.inbox.frame(self.reply_limit)
        except ValueError as e:
            slot.call = None
            self.kill_child(slot, f"{call.what} sent an oversized reply")
            self.reply(call.rid, fail("bad_return", f"{call.what}: {e}"))
            return
        if body is not None:
            self.finish(slot, body)

    def finish(self, slot: Slot, body: bytes) -> None:
        """A complete reply: checked (nonce, shape) and passed to the host, or the episode is killed."""
        call, slot.call = slot.call, None
        problem = ""
        if body[:NONCE_BYTES] != call.nonce:
            problem = "a reply without this request's nonce (forged, or out of order)"
        else:
            body = body[NONCE_BYTES:]
            problem = _check_reply(body)
        if problem:
            self.kill_child(slot, f"{call.what} sent a bad reply")
            self.reply(call.rid, fail("bad_return", f"{call.what}: {problem}"))
            return
        self.reply(call.rid, body)

    def child_died(self, slot: Slot) -> None:
        call, slot.call = slot.call, None
        what = call.what if call else "a call"
        how = self.kill_child(slot, "eof")
        slot.dead = f"it died during {what}"
        if call is None:
            return
        if "CPU" in how:
            self.reply(call.rid, fail("timeout", f"{what} exceeded the CPU-time limit ({self.cfg['cpu_seconds']} s)"))
        else:
            self.reply(call.rid, fail("crashed", f"{what}: the episode process died ({how or 'closed its channel'})"))

    def expire(self) -> None:
        """Kills the episode of every call past its deadline (that episode alone) and answers `timeout`, or
            `unavailable` when the call was starved: runnable at its deadline, having received less than
            STARVED_SHARE of its time limit in CPU (another session or the host took it; not the environment's
            doing, so never charged to it). Starved means: runnable at the deadline, with less than STARVED_SHARE of
        both its time limit and of an even share of the CPU the sandbox's busy sessions got meanwhile. A call that
        slept, waited, or spun on its share is a timeout; so is one on a host that is merely busy (alone, or among
        sessions that got no more than it did), which is no neighbour's doing."""
        now = time.monotonic()
        for slot in list(self.sessions.values()):
            call = slot.call
            if call is not None and now > call.deadline:
                slot.call = None
                state, cpu = cpu_state(slot.proc.pid)
                used = max(0.0, cpu - call.cpu0)
                others = [cpu_state(pid)[1] - c0 for pid, c0 in call.others0.items()]
                busy = [used] + [o for o in others if o > 0.01]
                fair = sum(busy) / len(busy)  # what an even share among the sessions that ran would have been
                self.kill_child(slot, f"{call.what} timed out")
                if state == "R" and call.cpu0 >= 0 and used < STARVED_SHARE * min(call.limit, fair):
                    why = (f"{call.what} was starved of CPU by other sessions: it got {used:.2f} s of CPU in "
                           f"{call.limit:g} s while runnable, they {sum(busy) - used:.2f} s (killed; not the "
                           "environment's doing)")  # fmt: skip
                    self.reply(call.rid, fail("unavailable", why))
                else:
                    why = f"{call.what} did not return within {call.limit:g} s (killed; {used:.2f} s of CPU)"
                    self.reply(call.rid, fail("timeout", why))

    def wrote_between_calls(self, slot: Slot) -> bool:
        """Whether the episode wrote to its channel while no request was open (EOF is not writing: a process
        that died between calls is reported by the request itself)."""
        if slot.inbox.buf:  # bytes after its last reply
            return True
        try:
            if not select.select([slot.proc.from_fd], [], [], 0)[0]:
                return False
            return bool(os.read(slot.proc.from_fd, 1))
        except OSError:
            return False

    def kill_child(self, slot: Slot, why: str) -> str:
        """Kills the session's episode process (its uid stays the session's until `end`); returns how it ended
        ('' when it was still running)."""
        proc, slot.proc = slot.proc, None
        slot.dead, slot.outbox, slot.inbox = why, memoryview(b""), Inbox()
        if proc is None:
            return ""
        status = self.exits.pop(proc.pid, None)
        for _ in range(20 if status is None and why == "eof" else 0):  # usually exiting on EOF: say how
            time.sleep(0.005)
            self.reap()
            status = self.exits.pop(proc.pid, None)
            if status is not None:
                break
        if status is None:
            _sigkill(proc.pid)  # reaped later by reap(), its status no longer wanted
        self.watched.discard(proc.pid)
        proc.close_fds()
        return describe(status)

    # processes ---------------------------------------------------------------------------------------
    def fork(self, uid: object) -> EpisodeProc:
        proc = fork_episode(self.cfg, uid)
        self.watched.add(proc.pid)
        return proc

    def take_spare(self) -> EpisodeProc:
        """The spare episode process if it is alive, else a fresh one under a free uid (OSError: none)."""
        self.reap()
        spare, self.spare = self.spare, None
        if spare is not None:
            if spare.pid not in self.exits:
                return spare
            self.exits.pop(spare.pid)
            self.retire(spare)
        if not self.free:
            raise OSError("no free episode uid")
        uid = self.free.pop(0)
        try:
            return self.fork(uid)
        except OSError:
            self.free.append(uid)
            raise

    def ensure_spare(self) -> None:
        """Forks the next episode process ahead of its load, under a free uid (retried later if the fork fails)."""
        if self.spare is not None or not self.free or time.monotonic() < self.spare_retry_at:
            return
        uid = self.free.pop(0)
        try:
            self.spare = self.fork(uid)
        except OSError:
            self.free.append(uid)
            self.spare_retry_at = time.monotonic() + 0.25

    def retire(self, proc: EpisodeProc) -> None:
        """Kills an episode process no session holds; its uid is cleaned before it is used again."""
        _sigkill(proc.pid)
        self.watched.discard(proc.pid)
        proc.close_fds()
        self.cleanings[proc.uid] = Cleaning(proc.uid, float(self.cfg["call_timeout_s"]), None)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.watched:
                self.exits[pid] = status

    # cleanup -----------------------------------------------------------------------------------------
    def step_cleanings(self) -> None:
        """Moves every cleanup on: a finished reaper's work is checked; another pass starts until clean or out of
        time (then `end` fails and the host replaces the sandbox)."""
        now = time.monotonic()
        for c in list(self.cleanings.values()):
            if c.reaper is not None:
                if c.reaper not in self.exits:
                    if now > c.deadline:
                        self.cleaned(c, False)
                    continue
                status = self.exits.pop(c.reaper)
                self.watched.discard(c.reaper)
                c.reaper, c.passes = None, c.passes + 1
                if self.is_clean(c.uid, status):
                    self.cleaned(c, True)
                    continue
                c.next_at = now + (1.0 if c.quarantined else min(0.001 * c.passes, 0.02))
            if now > c.deadline:
                self.cleaned(c, False)
            elif now >= c.next_at:
                try:
                    c.reaper = fork_reaper(self.cfg, c.uid, self.scratch, c.deadline, self.homes(c.uid))
                    self.watched.add(c.reaper)
                except OSError:
                    c.next_at = now + 0.01

    def is_clean(self, uid: object, status: int) -> bool:
        """Nothing of `uid` left: with a PID namespace checked here (processes, zombies included, and files);
        otherwise the reaper's word that all its files went."""
        if uid is None or not self.cfg.get("pidns"):
            return status == 0
        return not uid_processes(uid) and not owned_entries(self.scratch, uid, self.homes(uid))

    def homes(self, uid: object) -> tuple[str, ...]:
        """The uid's own tmpfs (dropped whole by `guard.fresh_home`, never walked), where there is one."""
        return (guard.home_of(self.cfg["tmp"], uid),) if self.cfg.get("homes") and uid is not None else ()

    def cleaned(self, c: Cleaning, ok: bool) -> None:
        del self.cleanings[c.uid]
        if c.reaper is not None:  # out of time (it may have been stopped by what it was killing)
            _sigkill(c.reaper)
            self.watched.discard(c.reaper)
        if ok and self.cfg.get("homes"):  # its tmpfs dropped whole and made afresh: nothing to walk
            ok = guard.fresh_home(self.cfg["tmp"], c.uid, self.cfg["tmp_mb"])
        if ok:
            self.free.append(c.uid)
        elif not c.quarantined:  # its uid stays out of use and is cleaned on in the background: the slow
            # cleanup costs the session that made it (its place ends now) and nobody beside it
            self.cleanings[c.uid] = Cleaning(c.uid, QUARANTINE_S, None, quarantined=True)
        if c.rid is not None:
            value = None if ok else {"quarantined": f"what the session left survived {c.budget:g} s of cleanup"}
            self.reply(c.rid, {"ok": True, "value": value})

    def shutdown(self) -> None:
        """The host is gone: every episode process dies and every uid is cleaned (bounded by one call timeout)."""
        for slot in self.sessions.values():
            self.kill_child(slot, "the host closed the channel")
            if slot.uid is not NO_UID:
                self.cleanings[slot.uid] = Cleaning(slot.uid, float(self.cfg["call_timeout_s"]), None)
        self.sessions.clear()
        if self.spare is not None:
            self.retire(self.spare)
            self.spare = None
        deadline = time.monotonic() + float(self.cfg["call_timeout_s"]) + 1.0
        while self.cleanings and time.monotonic() < deadline:
            self.reap()
            self.step_cleanings()
            time.sleep(REAPER_POLL_S)


def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cpu_state(pid: int) -> tuple[str, float]:
    """(scheduler state letter, user + system CPU seconds) of a process from /proc/<pid>/stat; ("", -1.0) when
    unreadable (gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return "", -1.0


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
    if not obj["ok"] and obj.get("error") not in EPISODE_ERRORS:
        return "malformed error reply from the episode process"
    return ""


def _facts(cfg: dict) -> dict:
    return {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "uids": cfg.get("uids"),
        "base_importable": "spade_jax.envs.base" in sys.modules,
        "private_mounts": cfg.get("mounts", False),
        "uid_homes": cfg.get("homes", False),
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
