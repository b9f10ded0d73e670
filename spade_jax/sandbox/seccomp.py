"""A seccomp filter for the bubblewrap level: no new namespaces, no mounts, none of the kernel's big attack
surfaces (BPF, io_uring, keyrings, perf, userfaultfd, ptrace, modules).

At the bwrap level environment code runs on the host kernel. Without this filter it can create a user
namespace, gain every capability inside it and mount its own tmpfs past the /tmp cap, and it can reach kernel
interfaces an ordinary game never needs. gVisor needs none of this (its kernel is its own). The program is
classic BPF for x86-64 only (`program()` returns None elsewhere; the launcher then says so loudly). Denied
calls fail with EPERM; clone3 fails with ENOSYS so that the C library falls back to clone, whose flags can be
checked (clone3 passes them in memory, out of a filter's reach).
"""

from __future__ import annotations

import platform
import struct

# x86-64 syscall numbers
DENIED = {
    "ptrace": 101, "pivot_root": 155, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442,
}  # fmt: skip
CLONE, CLONE3 = 56, 435
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_EPERM, _ENOSYS = 1, 38
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data


def program() -> bytes | None:
    """The filter as `struct sock_filter` records (what bwrap's --seccomp reads), or None off x86-64."""
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
    for nr in sorted(DENIED.values()):
        jump(_JEQ, nr, "deny")
    jump(_JEQ, CLONE3, "nosys")
    jump(_JEQ, CLONE, "clone")
    ops.append((_RET, 0, 0, _RET_ALLOW))
    labels = {"clone": len(ops)}
    ops.append((_LD_ABS_W, 0, 0, _ARG0))  # the low 32 bits of clone's flags hold every CLONE_NEW* bit
    jump(_JSET, CLONE_NEW_NAMESPACES, "deny")
    ops.append((_RET, 0, 0, _RET_ALLOW))
    labels["deny"] = len(ops)
    ops.append((_RET, 0, 0, _RET_ERRNO | _EPERM))
    labels["nosys"] = len(ops)
    ops.append((_RET, 0, 0, _RET_ERRNO | _ENOSYS))
    for at, target in fixups:
        code, _, jf, k = ops[at]
        ops[at] = (code, labels[target] - at - 1, jf, k)
    return b"".join(struct.pack("=HBBI", *op) for op in ops)
