"""What fences one episode process in, inside the sandbox: namespaces of its own, a seccomp filter, an audit hook.

STANDARD LIBRARY ONLY (ctypes for the three system calls the standard library does not wrap). Applied by the
episode process to itself (`procs.become_episode`), before it runs any environment code:

  * `isolate` (while it still has the zygote's privileges): a mount and an IPC namespace of its own, with a
    fresh tmpfs on /tmp (size- and, where the kernel allows, inode-capped; owned by the episode's uid) and on
    /dev/shm, and /proc mounted with hidepid=2. Sessions that share a worker then share no directory, no SysV or
    POSIX IPC object and see none of each other's processes; what a session wrote is dropped whole with its
    namespaces when its process dies (no tree to walk, whatever it left). Where the sandbox gives no privilege
    for it (process level) it returns False and the episode keeps the shared tmp's private directory.
  * `install_seccomp` (after the uid switch): the episode-level filter built on the host (`sandbox/seccomp.py`):
    no new process (fork, vfork, clone without CLONE_THREAD; threads are fine), no exec, no socket, no SysV or
    POSIX message queue IPC, no memfd, no namespaces or mounts, none of the kernel's risky interfaces. So a
    session is one process whose memory is bounded by its own RLIMIT_AS and its tmpfs: one session's excess is
    its own `memory` failure, never its neighbours'. The kernel enforces it, whatever the Python code does.
  * `install_audit_hook` (just before the environment's code runs): a PEP 578 hook that refuses, from then on,
    process creation, sockets, ctypes, the imports that lead around the other rules, opening files outside the
    episode's directory (writes) and the interpreter's own files (reads), exec/eval/compile called by the
    environment's own code (the standard library's helpers, dataclasses and namedtuple, keep theirs), and
    rewriting a function's code. Python code cannot remove an audit hook; every value the hook uses is bound
    when it is made (default arguments of builtin types), so environment code cannot change what it checks.
    It is the first fence for routes the static gate cannot judge; the filter and the sandbox hold beneath it.
"""

from __future__ import annotations

import itertools
import os
import sys

# Linux constants (x86-64 and arm64 agree on these)
_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_MS_REC, _MS_PRIVATE, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x4000, 0x40000, 0x2, 0x4, 0x8
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
TMP_INODES = 16384  # files and directories one session may hold in its tmp (where the kernel caps inodes)
SHM_MB = 1

# Audit events refused outright once environment code runs (the prefix before "." for families).
DENIED_EVENTS = frozenset(
    (
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.startfile",
        "subprocess.Popen", "pty.spawn", "code.__new__", "function.__new__", "mmap.__new__", "resource.setrlimit",
        "resource.prlimit", "sys.setswitchinterval", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        "sys._current_frames", "sys._current_exceptions", "os.add_dll_directory", "ctypes.dlopen",
        "sys.settrace", "sys.setprofile", "sys.addaudithook",
    )
)  # fmt: skip
DENIED_FAMILIES = ("socket.", "ctypes.", "_posixsubprocess.", "os.memfd", "winreg.", "msvcrt.")
# Modules whose import is refused: each leads around one of the rules above (raw memory, processes, sockets,
# shared memory, interpreters of their own).
DENIED_IMPORTS = frozenset(
    (
        "ctypes", "_ctypes", "subprocess", "_posixsubprocess", "multiprocessing", "_multiprocessing", "socket",
        "_socket", "_posixshmem", "mmap", "pty", "_xxsubinterpreters", "_xxinterpchannels", "asyncio",
        "selectors", "_ssl", "ssl", "signal", "_signal", "faulthandler", "resource", "fcntl", "termios",
    )
)  # fmt: skip
ENV_FILE = "<environment>"
# Audit events that change or create a path (checked against the episode's own directory) and that list one.
PATH_CHANGES = frozenset(
    (
        "os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.link", "os.symlink", "os.chmod", "os.chown",
        "os.utime", "os.truncate", "os.mkfifo", "os.mknod", "os.chflags", "os.lchflags", "os.setxattr",
        "os.removexattr", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
        "shutil.move", "shutil.rmtree", "shutil.chown", "tempfile.mkstemp", "tempfile.mkdtemp",
    )
)  # fmt: skip
PATH_LISTS = frozenset(("os.listdir", "os.scandir", "glob.glob", "glob.glob/2", "os.chdir", "os.getxattr",
                        "os.listxattr"))  # fmt: skip


def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def private_mounts_work(tmp: str) -> bool:
    """Whether a mount made in a new mount namespace stays there (probed once by the zygote): a child mounts a
    tmpfs in one and exits, and the zygote checks it does not see it. gVisor's runsc of Debian 12 accepts
    unshare(CLONE_NEWNS) but shares one mount table, so there an episode's tmpfs would cover every session's /tmp."""
    try:
        ctypes, libc = _libc()
    except (ImportError, OSError):
        return False
    probe = os.path.join(tmp, ".spade-mount-probe-" + os.urandom(6).hex())
    try:
        os.mkdir(probe, 0o700)
    except OSError:
        return False
    pid = os.fork()
    if pid == 0:
        ok = libc.unshare(_CLONE_NEWNS) == 0
        libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        ok = ok and libc.mount(b"tmpfs", probe.encode(), b"tmpfs", 0, b"size=1m") == 0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    leaked = os.stat(probe).st_dev != os.stat(tmp).st_dev
    if leaked:
        libc.umount2(probe.encode(), 2)  # MNT_DETACH
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return status == 0 and not leaked


def isolate(tmp: str, uid: int | None, tmp_mb: int, *, mounts: bool) -> bool:
    """Gives this process an IPC namespace of its own and, with `mounts` (see `private_mounts_work`), a mount
    namespace with a fresh tmpfs at `tmp` (owned by `uid`) and at /dev/shm, and /proc with hidepid=2; True when
    all of it is done (it needs the zygote's CAP_SYS_ADMIN, which the episode drops with its uid). False where it
    cannot be done; the IPC namespace may still have been made."""
    try:
        ctypes, libc = _libc()
    except (ImportError, OSError):
        return False
    if libc.unshare(_CLONE_NEWIPC | (_CLONE_NEWNS if mounts else 0)) != 0:
        return False
    if not mounts:
        return False
    libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
    owner = "" if uid is None else f",uid={uid},gid={uid}"
    flags = _MS_NOSUID | _MS_NODEV
    base = f"size={int(tmp_mb)}m,mode=0700{owner}"
    target = tmp.encode()
    if libc.mount(b"tmpfs", target, b"tmpfs", flags, f"{base},nr_inodes={TMP_INODES}".encode()) != 0:
        if libc.mount(b"tmpfs", target, b"tmpfs", flags, base.encode()) != 0:  # no nr_inodes (gVisor)
            return False
    if os.path.isdir("/dev/shm"):
        shm = f"size={SHM_MB}m,mode=0700{owner}".encode()
        if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", flags | _MS_NOEXEC, shm) != 0:
            return False
    libc.mount(b"proc", b"/proc", b"proc", flags | _MS_NOEXEC, b"hidepid=2")  # others' processes unseen
    return True


def home_of(tmp: str, uid: int) -> str:
    """Where an episode of `uid` lives when the zygote gives each uid a tmpfs of its own (`fresh_home`)."""
    return os.path.join(tmp, f"home-{uid}")


def fresh_home(tmp: str, uid: int, tmp_mb: int) -> bool:
    """(The zygote, where mount namespaces are not private.) Gives `uid` a fresh tmpfs of its own at
    `home_of(tmp, uid)`, size-capped and mode 0700: what the uid's last session wrote there is dropped whole (the
    old mount is detached), so its cleanup never walks a tree and its bytes never fill a neighbour's tmp."""
    try:
        ctypes, libc = _libc()
    except (ImportError, OSError):
        return False
    home = home_of(tmp, uid)
    try:
        os.mkdir(home, 0o700)
    except FileExistsError:
        libc.umount2(home.encode(), 2)  # MNT_DETACH: gone once nothing uses it (its episode is dead)
    except OSError:
        return False
    opts = f"size={int(tmp_mb)}m,mode=0700,uid={uid},gid={uid}".encode()
    return libc.mount(b"tmpfs", home.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) == 0


def install_seccomp(program: bytes) -> bool:
    """Installs a classic-BPF seccomp filter (`struct sock_filter` records) on this process and its threads,
    with no_new_privs; True when it is in force."""
    if not program:
        return False
    try:
        ctypes, libc = _libc()
    except (ImportError, OSError):
        return False

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


def _norm(path: str, cwd: str) -> str:
    """`path` absolute and with `.`/`..` resolved as text (symlinks are the sandbox's business); `cwd` is already
    canonical, so only `path` is walked (a deep cwd costs nothing). Uses no builtin by name: environment code may
    have replaced them."""
    absolute = path.startswith("/")
    out: list[str] = []
    up = 0
    for part in path.split("/"):
        if part == "" or part == ".":
            continue
        if part == "..":
            if out:
                out.pop()
            elif not absolute:
                up += 1
        else:
            out.append(part)
    base = "" if absolute else cwd.rstrip("/")
    while up > 0:
        base = base.rpartition("/")[0]
        up -= 1
    return base + "/" + "/".join(out)


def install_audit_hook(
    home: str, read_roots: tuple[str, ...], *, max_created: int = TMP_INODES, allow_exec: bool = False
) -> None:
    """Adds the audit hook described in the module docstring: files and directories are created, changed and
    removed only under `home` (the episode's own directory; at most `max_created` of them in all, so what its
    cleanup walks stays bounded), read or listed under `home`, `read_roots` (the interpreter's installation, the
    package), this process's /proc entries and /dev's null and random devices. A relative path without `..`
    stays below the working directory, which only a checked chdir moves (into `home` or a read root, both
    allowed; a read root is read-only to the episode), so it needs no check. `allow_exec` lets the loaded code
    itself compile and run code (a trusted runner of candidate programs; never an environment). Refusals raise
    PermissionError naming what was refused."""
    home = home.rstrip("/") + "/"
    me = f"/proc/{os.getpid()}/"
    roots = tuple(r.rstrip("/") + "/" for r in read_roots) + (home, "/proc/self/", "/proc/thread-self/", me,
                                                               "/dev/null/", "/dev/urandom/", "/dev/random/",
                                                               "/dev/zero/")  # fmt: skip

    def hook(
        event, args,
        _denied=DENIED_EVENTS, _families=DENIED_FAMILIES, _imports=DENIED_IMPORTS, _env=ENV_FILE,
        _changes=PATH_CHANGES, _lists=PATH_LISTS, _home=home, _roots=roots, _made=itertools.count(1),
        _cap=int(max_created), _getframe=sys._getframe, _getcwd=os.getcwd, _norm=_norm, _str=str, _bytes=bytes,
        _int=int, _type=type, _starts=str.startswith, _decode=bytes.decode, _tuple=tuple, _next=next,
        _error=PermissionError, _len=len, _any=any, _oserror=OSError, _exec_ok=bool(allow_exec),
    ):  # fmt: skip
        # Only values bound here are used (immutable ones, builtins): environment code cannot change what this
        # checks. Nothing here calls back into Python code the environment could have replaced.
        if _type(event) is not _str or event == "sys._getframe":
            return
        if event in _denied or _starts(event, _families):
            raise _error(f"{event} is not allowed in the sandbox")
        if event == "import":
            name = args[0] if args and _type(args[0]) is _str else ""
            if name.partition(".")[0] in _imports:
                raise _error(f"import of {name} is not allowed in the sandbox")
            return
        if event in ("compile", "exec"):
            if not _exec_ok and _getframe(1).f_code.co_filename == _env:
                raise _error(f"{event}() of new code is not allowed in an environment")
            return
        if event == "object.__setattr__":
            if (
                _len(args) >= 2
                and args[1] in ("__code__", "__defaults__", "__kwdefaults__")
                and (args[0] is hook or args[1] == "__code__")
            ):
                raise _error(f"setting {args[1]} is not allowed in the sandbox")
            return
        if event == "open":
            path, mode, flags = (_tuple(args) + (None, None, 0))[:3]
            creates = (_type(mode) is _str and _any(c in mode for c in "wax+")) or (
                _type(flags) is _int and (flags & 0o3 != 0 or flags & 0o100 != 0)
            )
            paths, changes = (path,), creates
        elif event in _changes:
            paths = _tuple(a for a in args[:2] if _type(a) in (_str, _bytes))
            changes = True
        elif event in _lists:
            paths, changes = (args[0] if args else ".",), False
        else:
            return
        for path in paths:
            if _type(path) is _int:
                continue  # an fd it already holds
            if _type(path) is _bytes:
                path = _decode(path, "utf-8", "surrogateescape")
            if _type(path) is not _str:
                raise _error(f"{event} of a path that is not a plain str is not allowed in the sandbox")
            if not _starts(path, "/") and ".." not in path.split("/"):
                continue  # below the working directory, which a checked chdir can only have put in a place allowed
            try:
                cwd = "/" if _starts(path, "/") else _getcwd()
            except _oserror:  # deeper than a path can say: nowhere it may be placed
                raise _error(f"{event} {path!r}: the working directory is too deep to place") from None
            full = _norm(path, cwd) + "/"
            if changes and not _starts(full, _home) and full != "/dev/null/":
                raise _error(f"{event} {path!r}: only the episode's own directory may be changed in the sandbox")
            if not changes and not _starts(full, _roots):
                raise _error(f"{event} {path!r}: not readable in the sandbox")
        if changes and event in ("open", "os.mkdir", "os.symlink", "os.link", "os.mkfifo", "os.mknod"):
            if _next(_made) > _cap:
                raise _error(f"{event}: more than {_cap} files made in one episode")

    sys.addaudithook(hook)
