"""Seccomp filters: one for a whole bubblewrap sandbox (`program`), one for every episode process at every level
(`episode_program`).

`program()` (bwrap's --seccomp): none of the kernel's big attack surfaces (BPF, io_uring, keyrings, perf,
userfaultfd, ptrace, modules, setns, clone with new-namespace flags). It still lets the trusted zygote give each
episode a mount and IPC namespace of its own (unshare, mount: `sandbox/inside/guard.py`).

`episode_program()` (installed by each episode process on itself, after its uid switch, before any environment
code runs): all of the above, plus no namespaces and no mounts at all (a user namespace would give its
capabilities back), no new process (fork, vfork, clone without CLONE_THREAD: threads stay), no exec, no
sockets, no SysV IPC, no POSIX message queues, no memfd. A session is then one process: its memory is its own
RLIMIT_AS plus its capped tmpfs, its CPU one process's threads, and it holds nothing that outlives it.

At the bwrap level environment code runs on the host kernel; under gVisor the filters bind the sentry's
emulation the same way. Classic BPF for x86-64 only (`None` elsewhere; the launcher says so loudly). Denied calls
fail with EPERM; clone3 fails with ENOSYS so that the C library falls back to clone, whose flags can be checked
(clone3 passes them in memory, out of a filter's reach).
"""

from __future__ import annotations

import platform
import struct

# x86-64 syscall numbers
DENIED = {
    "ptrace": 101, "pivot_root": 155, "chroot": 161, "acct": 163, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442,
}  # fmt: skip
# What an episode may not do beyond that (see the module docstring).
EPISODE_DENIED = {
    **DENIED, "mount": 165, "unshare": 272, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "socket": 41,
    "socketpair": 53, "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240, "mq_unlink": 241,
    "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "memfd_create": 319,
    "memfd_secret": 447, "kcmp": 312, "process_madvise": 440,
}  # fmt: skip
CLONE, CLONE3 = 56, 435
CLONE_THREAD = 0x00010000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_EPERM, _ENOSYS = 1, 38
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data


def program() -> bytes | None:
    """The whole-sandbox filter as `struct sock_filter` records (what bwrap's --seccomp reads), or None off
    x86-64."""
    return _build(DENIED, threads_only=False)


def episode_program() -> bytes | None:
    """The filter every episode process installs on itself (see the module docstring), or None off x86-64."""
    return _build(EPISODE_DENIED, threads_only=True)


def _build(denied: dict[str, int], *, threads_only: bool) -> bytes | None:
    """A filter refusing `denied` (EPERM), clone3 (ENOSYS) and clone with new-namespace flags, and with
    `threads_only` every clone that does not make a thread."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ops: list[tuple[int, int, int, int]] = []  # (code, jt, jf, k); jumps are filled in against labels below

    def jump(code: int, k: int, target: str) -> None:
        ops.append((code, 0, 0, k))
        fixups.append((len(ops) - 1, target))

    fixups: list[tuple[int, str]] = []
    ops.append((_LD_ABS_W, 0, 0, _ARCH))
    ops.append((_JEQ, 1, 0, _AUDIT_ARCH_X86_64))
    ops.append((_RET, 0, 0, _RET_KILL))  # another ABI: nothing we checked applies
    ops.append((_LD_ABS_W, 0, 0, _NR))
    jump(_JGE, _X32_BIT, "deny")  # the x32 ABI's numbers
    for nr in sorted(set(denied.values())):
        jump(_JEQ, nr, "deny")
    jump(_JEQ, CLONE3, "nosys")
    jump(_JEQ, CLONE, "clone")
    ops.append((_RET, 0, 0, _RET_ALLOW))
    labels = {"clone": len(ops)}
    ops.append((_LD_ABS_W, 0, 0, _ARG0))  # the low 32 bits of clone's flags hold every CLONE_NEW* bit
    jump(_JSET, CLONE_NEW_NAMESPACES, "deny")
    if threads_only:  # a thread shares the process (CLONE_THREAD); anything else is a new process
        ops.append((_JSET, 1, 0, CLONE_THREAD))  # set: skip the refusal below
        ops.append((_RET, 0, 0, _RET_ERRNO | _EPERM))
    ops.append((_RET, 0, 0, _RET_ALLOW))
    labels["deny"] = len(ops)
    ops.append((_RET, 0, 0, _RET_ERRNO | _EPERM))
    labels["nosys"] = len(ops)
    ops.append((_RET, 0, 0, _RET_ERRNO | _ENOSYS))
    for at, target in fixups:
        code, _, jf, k = ops[at]
        ops[at] = (code, labels[target] - at - 1, jf, k)
    return b"".join(struct.pack("=HBBI", *op) for op in ops)
