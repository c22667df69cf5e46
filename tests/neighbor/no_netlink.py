"""Run the exporter where the kernel refuses AF_NETLINK sockets, as a container runtime's
seccomp profile (or a sandbox such as gVisor) can: `python -m tests.neighbor.no_netlink
[exporter flags]`.

A real kernel fault, not a test double: a seccomp filter installed before the exporter
starts makes socket(AF_NETLINK, ...) fail with EAFNOSUPPORT in every thread, while the
HTTP server's AF_INET sockets work.
"""

import ctypes
import errno
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
SYS_SOCKET_X86_64 = 41
AF_NETLINK = 16
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
LD_ABS_W, JEQ_K, RET_K = 0x20, 0x15, 0x06

# seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low 32 bits on little endian).
PROGRAM = [
    (LD_ABS_W, 0, 0, 4),
    (JEQ_K, 0, 5, AUDIT_ARCH_X86_64),
    (LD_ABS_W, 0, 0, 0),
    (JEQ_K, 0, 3, SYS_SOCKET_X86_64),
    (LD_ABS_W, 0, 0, 16),
    (JEQ_K, 0, 1, AF_NETLINK),
    (RET_K, 0, 0, RET_ERRNO | errno.EAFNOSUPPORT),
    (RET_K, 0, 0, RET_ALLOW),
]


def deny_netlink() -> None:
    if platform.machine() != "x86_64":
        raise SystemExit(f"no_netlink: the filter is written for x86_64, not {platform.machine()}")
    code = b"".join(struct.pack("=HBBI", *insn) for insn in PROGRAM)
    filters = ctypes.create_string_buffer(code)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(PROGRAM), ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    if (
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0
    ):
        raise OSError(ctypes.get_errno(), "installing the seccomp filter")


if __name__ == "__main__":
    deny_netlink()
    from kube_scale_exporter.cli import main

    raise SystemExit(main(sys.argv[1:]))
