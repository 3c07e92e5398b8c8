"""The seccomp filter that refuses new user namespaces inside the sandbox (issue 31 item 7).

Replayed code could create a user namespace (``unshare -U``, ``unshare(CLONE_NEWUSER)``):
the kernel's most used door to privilege inside a sandbox. bubblewrap's own switch,
``--disable-userns``, needs ``--unshare-user``; the worker runs bwrap as root without one (a
user namespace would map the sandbox's user to the worker's own uid, host root, and
RLIMIT_NPROC would count every root process of the host), so bwrap loads this filter instead
(``--seccomp FD``, applied with ``no_new_privs`` just before the sandboxed command runs, and
inherited by everything it starts). Checked on this machine (bwrap 0.8.0, kernel 6.18): with
it, ``unshare -U`` and ``unshare(CLONE_NEWUSER)`` fail with EPERM; without it, both succeed.

The program (classic BPF, ``struct sock_filter``): a system call of another architecture
(i386 ``int 0x80``, x32) is refused; ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` are
refused with EPERM; ``clone3`` (whose flags are behind a pointer a filter cannot read)
answers ENOSYS, so the C library falls back to ``clone``; everything else is allowed.
"""

from __future__ import annotations

import contextlib
import os
import platform
import struct
from collections.abc import Iterator

CLONE_NEWUSER = 0x10000000
EPERM, ENOSYS = 1, 38
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_X32_BIT = 0x40000000
#: per machine: the audit architecture, and the numbers of unshare, clone and clone3
SYSCALLS = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}


def userns_filter(machine: str | None = None) -> bytes:
    """The filter program for ``machine`` (this one's by default), as bwrap reads it."""
    try:
        arch, unshare, clone, clone3 = SYSCALLS[machine or platform.machine()]
    except KeyError:
        raise OSError(f"no user-namespace filter for the machine {machine!r}") from None
    # (code, jump if true, jump if false, k); jumps count the instructions skipped
    program = [
        (_LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 0, 8, arch),  # another architecture: EPERM
        (_LD_ABS, 0, 0, 0),  # seccomp_data.nr
        (_JGE, 6, 0, _X32_BIT),  # the x32 ABI: EPERM
        (_JEQ, 6, 0, clone3),  # ENOSYS
        (_JEQ, 1, 0, unshare),  # look at its flags
        (_JEQ, 0, 2, clone),  # look at its flags, or allow
        (_LD_ABS, 0, 0, 16),  # the low half of args[0]: the flags of both calls
        (_JSET, 1, 0, CLONE_NEWUSER),
        (_RET, 0, 0, _ALLOW),
        (_RET, 0, 0, _ERRNO | EPERM),
        (_RET, 0, 0, _ERRNO | ENOSYS),
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


@contextlib.contextmanager
def userns_filter_fd() -> Iterator[int]:
    """A file descriptor holding the filter at offset 0, for ``bwrap --seccomp FD`` (pass it
    to the child with ``pass_fds``; the child holds its own copy); ours is closed on exit."""
    fd = os.memfd_create("replaybook-userns-filter")
    try:
        os.write(fd, userns_filter())
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)
