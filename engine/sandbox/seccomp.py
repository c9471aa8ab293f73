"""A seccomp filter for model-written snippets: the system calls a pandas/matplotlib snippet never
needs and an escape would, answered with EPERM. ``bwrap --seccomp FD`` installs it (after it set up
the sandbox, before it execs Python), so every process of the snippet runs under it.

bubblewrap takes a compiled classic-BPF program; libseccomp is not a dependency here, so the
program is assembled below: check the architecture (another ABI, such as x32 on x86_64, is
refused outright), load the syscall number, and compare it with each denied number.

Denied (besides what the namespaces and the dropped capabilities already stop): tracing and
reading other processes' memory (``ptrace``, ``process_vm_readv/writev``), new namespaces and
mounts (``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``, ``chroot``, ``fsopen`` ...),
kernel keyrings, BPF, perf events, ``userfaultfd``, ``io_uring`` (its requests bypass seccomp),
module loading, ``kexec``, ``reboot``, ``swapon``, ``open_by_handle_at`` and ``personality``.

Answered otherwise: ``fallocate`` gets EOPNOTSUPP (a preallocation reserves blocks without writing
them, in one call of any size: glibc's ``posix_fallocate`` then falls back to writing, which the
folder's quota counts and RLIMIT_FSIZE caps); ``socket`` and ``socketpair`` of any family but
``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` get EAFNOSUPPORT (``AF_VSOCK`` reaches the hypervisor's
host, ``AF_NETLINK``, ``AF_PACKET``, ``AF_ALG`` ... are kernel surface a snippet never needs; the
network namespace already leaves the Internet families nothing but their own loopback).
"""

from __future__ import annotations

import platform
import struct

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
_LD_W_ABS = 0x20          # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15             # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35             # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06             # BPF_RET | BPF_K
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, EOPNOTSUPP, EAFNOSUPPORT = 1, 95, 97
_SECCOMP_DATA_ARG0 = 16   # offsetof(struct seccomp_data, args[0]); its low 32 bits on little-endian ABIs
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
ALLOWED_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)
# (syscall, errno): answered with another error than EPERM
OTHER_ERRNO = {"fallocate": EOPNOTSUPP}

DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "unshare", "setns", "mount", "umount2",
          "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
          "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "init_module", "finit_module",
          "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
          "open_by_handle_at", "name_to_handle_at", "personality", "lookup_dcookie", "syslog", "vhangup",
          "settimeofday", "clock_settime", "adjtimex", "clock_adjtime")

_X86_64 = {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "unshare": 272,
           "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "fsopen": 430,
           "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
           "mount_setattr": 442, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
           "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
           "io_uring_register": 427, "init_module": 175, "finit_module": 313, "delete_module": 176,
           "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
           "quotactl": 179, "open_by_handle_at": 304, "name_to_handle_at": 303, "personality": 135,
           "lookup_dcookie": 212, "syslog": 103, "vhangup": 153, "settimeofday": 164, "clock_settime": 227,
           "adjtimex": 159, "clock_adjtime": 305, "fallocate": 285, "socket": 41, "socketpair": 53}
# the generic table (asm-generic/unistd.h), used by aarch64
_AARCH64 = {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "unshare": 97,
            "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
            "mount_setattr": 442, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
            "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "init_module": 105, "finit_module": 273, "delete_module": 106,
            "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
            "quotactl": 60, "open_by_handle_at": 265, "name_to_handle_at": 264, "personality": 92,
            "lookup_dcookie": 18, "syslog": 116, "vhangup": 58, "settimeofday": 170, "clock_settime": 112,
            "adjtimex": 171, "clock_adjtime": 266, "fallocate": 47, "socket": 198, "socketpair": 199}
# (AUDIT_ARCH_*, syscall table, first number of an ABI to refuse (x32 on x86_64) or None)
ARCHES = {"x86_64": (0xC000003E, _X86_64, 0x40000000), "aarch64": (0xC00000B7, _AARCH64, None)}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The compiled filter for this machine's architecture, or None where none is defined (the
    sandbox then runs without one and says so)."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, table, bad_abi = arch
    deny = _ins(_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM)
    out = [_ins(_LD_W_ABS, 0, 0, 4),                  # seccomp_data.arch
           _ins(_JEQ_K, 1, 0, audit_arch), deny,      # another architecture: refused
           _ins(_LD_W_ABS, 0, 0, 0)]                  # seccomp_data.nr
    if bad_abi is not None:                          # x32 system calls on x86_64: refused
        out += [_ins(_JGE_K, 0, 1, bad_abi), deny]
    for name in DENIED:
        out += [_ins(_JEQ_K, 0, 1, table[name]), deny]
    for name, err in OTHER_ERRNO.items():
        out += [_ins(_JEQ_K, 0, 1, table[name]), _ins(_RET_K, 0, 0, SECCOMP_RET_ERRNO | err)]
    # socket/socketpair: the family (args[0]) must be one of ALLOWED_FAMILIES; the block ends the
    # program (the accumulator no longer holds the syscall number after it)
    n = len(ALLOWED_FAMILIES)
    out += [_ins(_JEQ_K, 1, 0, table["socket"]),
            _ins(_JEQ_K, 0, n + 2, table["socketpair"]),          # neither: to ALLOW
            _ins(_LD_W_ABS, 0, 0, _SECCOMP_DATA_ARG0)]
    out += [_ins(_JEQ_K, n - i, 0, fam) for i, fam in enumerate(ALLOWED_FAMILIES)]
    out += [_ins(_RET_K, 0, 0, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
            _ins(_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    return b"".join(out)
