"""Sandbox launchers for environment workers: gVisor (`runsc`), bubblewrap, or a plain process.

Every level starts the same stdlib-only worker (`spade_jax.sandbox.inside.worker`) with a clean environment. The
filesystem view of `gvisor` and `bwrap` is: the interpreter and /usr read-only, the `spade_jax` package
read-only at /opt/spade, a private size-capped /tmp, /proc of its own PID namespace, no network, and
nothing of the project tree, the run directory or the home directory. The episode process inside runs
as a fresh unprivileged uid (so RLIMIT_NPROC binds) with rlimits on memory, CPU, files and processes.
`process` is the last resort: no filesystem or network isolation, only rlimits and the uid switch.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spade_jax.config.sandbox import LEVEL_CHOICES, LEVELS
from spade_jax.sandbox import cgroups, protocol, seccomp
from spade_jax.sandbox.inside import worker as inside_worker
from spade_jax.sandbox.inside.cleanup import remove_tree
from spade_jax.sandbox.process import SandboxProcess, kill_uid
from spade_jax.sandbox.tempdirs import close_all, owned_tempdir, release_dir, remove_stale_dirs

__all__ = ["LEVELS", "LEVEL_CHOICES", "Launcher", "SandboxConfig", "SandboxProcess", "SandboxUnavailable",
           "close_all", "detect_level", "remove_stale_dirs", "start_worker"]  # fmt: skip

log = logging.getLogger(__name__)

PKG_ROOT_IN_SANDBOX = "/opt/spade"
# The worker is named by the module object imported above, so renaming or moving it breaks this import, not a
# sandbox start at run time.
_BOOT = "import sys; sys.path[0:1] = [{root!r}]; from " + inside_worker.__name__ + " import main; main(sys.argv[1])"
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass
class SandboxConfig:
    """Isolation level and per-environment limits (all enforced for every level)."""

    level: str = "auto"  # gvisor | bwrap | process | auto (strongest that really works here)
    call_timeout_s: float = 5.0  # wall clock per call; past it the episode is killed
    load_timeout_s: float = 10.0  # wall clock for loading + constructing the environment
    memory_mb: int = 512  # RLIMIT_AS of the episode process
    cpu_seconds: int = 60  # RLIMIT_CPU of the episode process (a whole session)
    max_open_files: int = 64
    max_file_mb: int = 16  # RLIMIT_FSIZE
    max_processes: int = 32  # RLIMIT_NPROC for the episode's own uid
    max_return_bytes: int = 65536  # JSON bytes one call may return
    tmp_mb: int = 64  # size of each session's private /tmp (gvisor, bwrap)
    # Bounds on the whole sandbox (its cgroup: every process, memfd/tmpfs file and SysV segment in it together);
    # 0 picks K x (memory_mb + tmp_mb + 1) + tmp_mb + 384 MB (sessions, runtime, worker, the spare episode) and
    # K x max_processes + 16
    # processes (32 x that for gVisor, whose host side is threads and stub processes), for K sessions per worker.
    sandbox_memory_mb: int = 0
    sandbox_processes: int = 0
    start_timeout_s: float = 30.0  # sandbox start until the worker says ready
    max_source_bytes: int = 2_000_000
    python: str | None = None  # interpreter inside the sandbox; default: this one's base executable
    runsc_flags: tuple[str, ...] = field(default_factory=tuple)  # e.g. ("--platform=kvm",)

    def __post_init__(self) -> None:
        if self.level not in (*LEVELS, "auto"):
            raise ValueError(f"sandbox level must be one of gvisor, bwrap, process, auto; got {self.level!r}")
        if self.call_timeout_s <= 0 or self.load_timeout_s <= 0:
            raise ValueError("sandbox timeouts must be > 0")
        if self.sandbox_memory_mb < 0 or self.sandbox_processes < 0:
            raise ValueError("sandbox_memory_mb and sandbox_processes must be >= 0 (0: automatic)")

    def limits(self, level: str, sessions: int = 1) -> cgroups.Limits:
        """The whole-sandbox bounds in force at `level` for a worker serving up to `sessions` sessions at once
        (see `sandbox_memory_mb`, `sandbox_processes`): each session may use what one episode may."""
        # every session's own bound (its process's RLIMIT_AS, its tmpfs, its /dev/shm) together: a session cannot
        # hold memory outside them (sandbox/inside/guard.py), so no session's excess reaches its neighbours
        memory = self.sandbox_memory_mb or sessions * (self.memory_mb + self.tmp_mb + 1) + self.tmp_mb + 384
        # gVisor's host side is the sentry's threads plus a stub process per address space: far more tasks
        procs = self.sandbox_processes or (sessions * self.max_processes + 16) * (32 if level == "gvisor" else 1)
        return cgroups.Limits(memory_mb=memory, pids=procs)


class SandboxUnavailable(RuntimeError):
    """The requested sandbox level cannot run on this machine."""


# ---------------------------------------------------------------------------------------------- launcher


def _base_python() -> str:
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe)


def _world_traversable(path: str) -> bool:
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in p.parents) and bool(os.stat(p).st_mode & 0o004)


def _python_for_other_uids(python: str) -> str | None:
    """An interpreter of the same version that an unprivileged uid can run with its stdlib, or None."""
    prefix = str(Path(python).resolve().parent.parent)
    if _world_traversable(os.path.join(prefix, "lib")):
        return python
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for d in ("/usr/bin", "/usr/local/bin"):
        cand = os.path.join(d, name)
        if os.access(cand, os.X_OK) and _world_traversable(cand):
            return cand
    return None


class Launcher:
    """Starts sandboxed workers of one level; owns a private temp dir (gVisor bundles and state, tmp dirs).

    Each worker gets `sessions` + 1 episode uids (one per session it serves at once, one for its spare), so no two
    live sessions share a uid. Where episodes cannot change uid (`drop_uid` False: bwrap or process level without
    root) sessions on one worker could not be told apart: `sessions` is then 1, whatever was asked."""

    def __init__(self, config: SandboxConfig, level: str, sessions: int = 1):
        if level not in LEVELS:
            raise ValueError(f"unknown sandbox level {level!r}")
        self.config, self.level = config, level
        self.python = config.python or _base_python()
        self.is_root = os.geteuid() == 0
        self.drop_uid = self.is_root or level == "gvisor"
        if level == "process" and self.is_root:
            usable = _python_for_other_uids(self.python)
            if usable is None:
                log.warning("process sandbox: no interpreter an unprivileged uid can read; env runs as root")
                self.drop_uid = False
            else:
                self.python = usable
        self.sessions = max(1, int(sessions)) if self.drop_uid else 1
        import spade_jax

        self.pkg_dir = str(Path(spade_jax.__file__).resolve().parent)
        self.dir = owned_tempdir(level)
        self._mounts = self._ro_mounts() if level != "process" else []
        if level == "gvisor":
            self._make_rootfs()

    def close(self) -> None:
        """Removes the temp dir (idempotent; episode files in it, process level, cannot stop that: `remove_tree`).
        The worker processes are the pool's to kill, before this."""
        release_dir(self.dir)

    # filesystem view ------------------------------------------------------------------------------
    def _ro_mounts(self) -> list[tuple[str, str]]:
        """(host path, sandbox path) read-only binds: /usr, real top-level dirs, interpreter, package."""
        mounts = [("/usr", "/usr")]
        for name in _TOP_LINKS:
            host = f"/{name}"
            if os.path.isdir(host) and not os.path.islink(host):
                mounts.append((host, host))
        prefix = str(Path(self.python).resolve().parent.parent)
        if not any(prefix == src or prefix.startswith(src + "/") for src, _ in mounts):
            mounts.append((prefix, prefix))  # same path: the interpreter finds libpython through its RPATH
        mounts.append((self.pkg_dir, f"{PKG_ROOT_IN_SANDBOX}/spade_jax"))
        return mounts

    def _links(self) -> list[tuple[str, str]]:
        return [(os.readlink(f"/{n}"), f"/{n}") for n in _TOP_LINKS if os.path.islink(f"/{n}")]

    def _make_rootfs(self) -> None:
        root = Path(self.dir, "rootfs")
        for sub in ("proc", "dev", "tmp", *(dst.lstrip("/") for _, dst in self._mounts)):
            (root / sub).mkdir(parents=True, exist_ok=True)
        for target, name in self._links():
            os.symlink(target, root / name.lstrip("/"))
        for d in [root, *root.rglob("*")]:
            if d.is_dir() and not d.is_symlink():
                os.chmod(d, 0o755)

    # worker config --------------------------------------------------------------------------------------
    def _worker_config(self, uids: list[int] | None, tmp: str) -> dict:
        c = self.config
        return {
            **{k: v for k, v in asdict(c).items() if k not in ("python", "runsc_flags", "level")},
            "uids": uids,
            "tmp": tmp,
            "pidns": self.level != "process",
            # each episode gets mount and IPC namespaces of its own, with a private tmpfs /tmp (sandbox/inside/guard.py)
            "isolate": self.level != "process",
            "episode_seccomp": (seccomp.episode_program() or b"").hex(),
            "max_request_bytes": c.max_source_bytes + 65536,
        }

    def _env(self, tmp: str) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": tmp, "TMPDIR": tmp}

    def _argv(self, root: str, cfg: dict) -> list[str]:
        return [self.python, "-S", "-s", "-B", "-c", _BOOT.format(root=root), json.dumps(cfg)]

    # launch -----------------------------------------------------------------------------------------------
    def launch(self) -> SandboxProcess:
        """Starts one sandbox; the caller reads the worker's ready frame from `proc.reader`."""
        uids = None
        if self.drop_uid:
            chosen: set[int] = set()
            while len(chosen) < self.sessions + 1:
                chosen.add(1 << 20 | secrets.randbelow(1 << 29))
            uids = sorted(chosen)
        return getattr(self, f"_launch_{self.level}")(uids)

    def _start(
        self, argv: list[str], env: dict, *, cwd: str | None = None, on_kill=None, pass_fds: tuple[int, ...] = ()
    ) -> SandboxProcess:
        """Starts the sandbox in a cgroup of its own (when the host allows one, see `cgroups`) from the
        process-lifetime spawner thread (see `_spawner`)."""
        cgroup = None
        limits = self.config.limits(self.level, self.sessions)
        if not _cgroup_refusal(limits, self.level):
            try:
                cgroup = cgroups.Cgroup.create(limits)
                argv = cgroup.wrap(argv)
            except OSError as e:
                log.warning("sandbox started WITHOUT its memory/process bound: %s", e)
        kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd or self.dir)
        try:
            start = _spawner().submit(subprocess.Popen, argv, **kw, start_new_session=True, pass_fds=pass_fds)
            popen = start.result()
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        return SandboxProcess(popen, self.level, on_kill, cgroup)

    def _launch_process(self, uids: list[int] | None) -> SandboxProcess:
        tmp = tempfile.mkdtemp(prefix="tmp-", dir=self.dir)
        if uids is not None:
            os.chmod(tmp, 0o1777)  # every episode uid writes here; the launcher dir itself is 0711
        root = str(Path(self.pkg_dir).parent)

        def cleanup() -> None:
            for uid in uids or ():
                kill_uid(uid, self.python)
            remove_tree(tmp)  # what the episodes left there (mode 000, 10^5 levels deep) cannot stop it

        return self._start(self._argv(root, self._worker_config(uids, tmp)), self._env(tmp), cwd=tmp, on_kill=cleanup)

    def _launch_bwrap(self, uids: list[int] | None) -> SandboxProcess:
        argv = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if self.is_root:  # no user namespace: it would map the sandbox to host root, where NPROC never binds
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            argv += ["--cap-add", "CAP_KILL"]
            # for the episodes' own mount and IPC namespaces (the zygote's; each episode drops it with its uid)
            argv += ["--cap-add", "CAP_SYS_ADMIN"]
        else:
            argv += ["--unshare-user"]
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        bpf = self._seccomp_fd()
        if bpf is not None:
            argv += ["--seccomp", str(bpf)]
        made: set[str] = set()
        for src, dst in self._mounts:
            for parent in reversed(Path(dst).parents):
                p = str(parent)
                if p != "/" and p not in made:
                    made.add(p)
                    argv += ["--perms", "0755", "--dir", p]
            argv += ["--ro-bind", src, dst]
        for target, name in self._links():
            argv += ["--symlink", target, name]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--perms", "1777", "--size", str(self.config.tmp_mb << 20), "--tmpfs", "/tmp", "--chdir", "/tmp"]
        argv += ["--", *self._argv(PKG_ROOT_IN_SANDBOX, self._worker_config(uids, "/tmp"))]
        try:
            return self._start(argv, self._env("/tmp"), pass_fds=() if bpf is None else (bpf,))
        finally:
            if bpf is not None:
                os.close(bpf)

    def _seccomp_fd(self) -> int | None:
        """A fresh read fd on the seccomp program (`seccomp.program`; bwrap reads it once at start), or None
        where there is none (said loudly once)."""
        program = seccomp.program()
        if program is None:
            if not _warned.get("seccomp"):
                _warned["seccomp"] = True
                log.warning("SANDBOX (bwrap): no seccomp filter on %s; environments may create namespaces and "
                            "mount filesystems inside the sandbox", platform.machine())  # fmt: skip
            return None
        path = os.path.join(self.dir, "seccomp.bpf")
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(program)
        return os.open(path, os.O_RDONLY)

    def _launch_gvisor(self, uids: list[int] | None) -> SandboxProcess:
        cid = f"spade-{os.getpid()}-{secrets.token_hex(6)}"
        bundle = Path(self.dir, cid)
        bundle.mkdir()
        state = bundle / "state"
        state.mkdir()
        # CAP_SYS_ADMIN (gVisor's own, inside the sentry) lets the worker give each episode a fresh IPC namespace;
        # the episode itself runs under an unprivileged uid with no capabilities (and no new privileges).
        caps = ["CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_ADMIN"]
        mounts = [{"destination": "/proc", "type": "proc", "source": "proc"}]
        mounts += [{"destination": d, "type": "bind", "source": s, "options": ["ro", "rbind"]} for s, d in self._mounts]
        tmp_opts = ["mode=1777", f"size={self.config.tmp_mb}m"]
        mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": tmp_opts})
        spec = {
            "ociVersion": "1.0.0",
            "process": {
                "user": {"uid": 0, "gid": 0},
                "args": self._argv(PKG_ROOT_IN_SANDBOX, self._worker_config(uids, "/tmp")),
                "env": [f"{k}={v}" for k, v in self._env("/tmp").items()],
                "cwd": "/tmp",
                "terminal": False,
                "noNewPrivileges": True,
                "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            },
            "root": {"path": str(Path(self.dir, "rootfs")), "readonly": True},
            "hostname": "sandbox",
            "mounts": mounts,
            "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
        }
        (bundle / "config.json").write_text(json.dumps(spec))
        argv = ["runsc", "--root", str(state), "--rootless", "--network=none", "--ignore-cgroups"]
        argv += [*self.config.runsc_flags, "run", "--bundle", str(bundle), cid]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return self._start(argv, env, on_kill=lambda: shutil.rmtree(bundle, ignore_errors=True))


# ----------------------------------------------------------------------------------------------- detection

_detected: dict[tuple, str] = {}
_SPAWNER: list[concurrent.futures.ThreadPoolExecutor] = []
_spawner_lock = threading.Lock()


def _spawner() -> concurrent.futures.ThreadPoolExecutor:
    """One thread, alive as long as the process, that starts every sandbox. bwrap's --die-with-parent is
    PR_SET_PDEATHSIG, which fires when the *thread* that started it exits, not the process: a sandbox started
    from a short-lived thread (a rollout engine's, a gate's) was killed when that thread ended, and the next
    environment's load() then failed as if it had crashed the sandbox."""
    with _spawner_lock:
        if not _SPAWNER:
            _SPAWNER.append(concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawn"))
        return _SPAWNER[0]


_cgroup_refusals: dict[tuple, str] = {}
_warned: dict[str, bool] = {}


def _cgroup_refusal(limits: cgroups.Limits, level: str) -> str:
    """Why sandboxes here get no cgroup ('' when they do); probed once per process and limits, and said
    loudly the first time (once per reason), like the sandbox level."""
    key = (level, limits)
    with _spawner_lock:
        if key not in _cgroup_refusals:
            if not _cgroup_refusals:
                cgroups.remove_stale()
            why = cgroups.probe(key[1])
            if why and not _warned.get(f"cgroup: {why}"):
                _warned[f"cgroup: {why}"] = True
                log.warning(
                    "SANDBOX LIMITS: no per-sandbox bound on total memory and processes (%s); each episode "
                    "process keeps its rlimits, but its children, memfd files and SysV segments together are not "
                    "bounded", why,
                )  # fmt: skip
            _cgroup_refusals[key] = why
        return _cgroup_refusals[key]


_detect_lock = threading.Lock()


def start_worker(launcher: Launcher) -> tuple[SandboxProcess, dict]:
    """Launches one sandbox and waits for its worker's ready frame; raises SandboxUnavailable on failure."""
    proc = launcher.launch()
    try:
        ready = proc.reader.read(time.monotonic() + launcher.config.start_timeout_s, 1 << 20)
    except protocol.ChannelError as e:
        proc.kill()
        tail = proc.stderr_tail().splitlines()[-3:]
        raise SandboxUnavailable(f"{launcher.level} sandbox did not start ({e}): {' | '.join(tail)}") from None
    except BaseException:  # Ctrl-C or SIGTERM while it starts: the half-started sandbox goes too
        proc.kill()
        raise
    if not (isinstance(ready, dict) and ready.get("ok")):
        proc.kill()
        raise SandboxUnavailable(f"{launcher.level} sandbox sent a bad ready frame: {ready!r:.200}")
    return proc, ready["value"]


def _probe(level: str, config: SandboxConfig) -> str | None:
    """None when `level` really starts a worker here, else why not."""
    binary = {"gvisor": "runsc", "bwrap": "bwrap"}.get(level)
    if binary and shutil.which(binary) is None:
        return f"`{binary}` is not installed"
    launcher = Launcher(config, level)
    try:
        proc, facts = start_worker(launcher)
        proc.kill()
        if not facts.get("base_importable"):
            return "the worker cannot import spade_jax.envs.base inside the sandbox"
        return None
    except (SandboxUnavailable, OSError) as e:
        return str(e)
    finally:
        launcher.close()


def detect_level(level: str = "auto", config: SandboxConfig | None = None) -> str:
    """The level in force: `level` if it really works here (else SandboxUnavailable), or for `auto` the
    strongest of gvisor > bwrap > process that starts a worker. Detected once per process and logged."""
    config = config or SandboxConfig()
    if level not in (*LEVELS, "auto"):
        raise ValueError(f"sandbox level must be one of gvisor, bwrap, process, auto; got {level!r}")
    key = (level, config.python or _base_python())
    with _detect_lock:
        if key in _detected:
            return _detected[key]
        reasons = []
        for cand in LEVELS if level == "auto" else (level,):
            why = _probe(cand, config)
            if why is None:
                if cand == "process":
                    log.warning(
                        "SANDBOX LEVEL 'process': environment code runs as a plain subprocess with rlimits "
                        "only, no filesystem or network isolation%s",
                        f" ({'; '.join(reasons)})" if reasons else "",
                    )
                elif reasons:  # auto fell back from a stronger level
                    log.warning("sandbox level in force: %s (%s)", cand, "; ".join(reasons))
                else:
                    log.info("sandbox level in force: %s", cand)
                _detected[key] = cand
                return cand
            reasons.append(f"{cand}: {why}")
        raise SandboxUnavailable(f"sandbox level {level!r} does not work here: {'; '.join(reasons)}")
