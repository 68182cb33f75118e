"""Ask the running kernel for its verdict on BTF: bpf(2) with BPF_BTF_LOAD.

``BPF_BTF_LOAD`` runs the kernel's full BTF check (kernel/bpf/btf.c) on a
base BTF blob and returns a file descriptor when the blob is accepted.  It
needs CAP_BPF or CAP_SYS_ADMIN.

Split BTF cannot be checked this way.  The command takes no base: Linux 6.1's
``union bpf_attr`` has no field for one, and later kernels added only
``btf_log_true_size``, ``btf_flags`` and ``btf_token_fd``.  The kernel accepts split BTF only from a
module's ``.BTF`` section when the module is loaded (``btf_parse_module``,
which runs the per-type checks and the type tag check but not reference
resolution), so the only kernel check of module BTF is loading the module.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
from typing import NamedTuple

from ..btf import Btf

#: bpf(2) system call numbers by ``platform.machine()``.
BPF_SYSCALL = {
    'x86_64': 321, 'i386': 357, 'i686': 357, 'aarch64': 280, 'arm64': 280,
    'armv7l': 386, 'armv6l': 386, 'riscv64': 280, 'loongarch64': 280,
    'ppc64le': 361, 'ppc64': 361, 's390x': 351,
}
BPF_BTF_LOAD = 18
#: The verifier log level that logs every type and the reason for a rejection.
LOG_LEVEL = 1
#: The kernel refuses log buffers larger than this (UINT_MAX >> 2).
MAX_LOG_SIZE = 0xffffffff >> 2


class LoadResult(NamedTuple):
    """The kernel's verdict: ``errno`` is 0 when ``ok``; ``log`` is its verifier log."""
    ok: bool
    errno: int
    log: str


class BtfLoadAttr(ctypes.Structure):
    """The BPF_BTF_LOAD member of ``union bpf_attr`` (include/uapi/linux/bpf.h).

    ``btf_log_true_size`` (6.4), ``btf_flags`` and ``btf_token_fd`` (6.9) are
    left zero, which older kernels require of bytes past their last field.
    """
    _fields_ = [
        ('btf', ctypes.c_uint64),
        ('btf_log_buf', ctypes.c_uint64),
        ('btf_size', ctypes.c_uint32),
        ('btf_log_size', ctypes.c_uint32),
        ('btf_log_level', ctypes.c_uint32),
        ('btf_log_true_size', ctypes.c_uint32),
        ('btf_flags', ctypes.c_uint32),
        ('btf_token_fd', ctypes.c_int32),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def load_btf(data: bytes, base: Btf | bytes | None = None,
             log_size: int = 1 << 20) -> LoadResult:
    """Load base BTF ``data`` into the kernel and unload it again.

    The verdict comes from a load without a log (a big blob's full log can be
    larger than the blob, and a log that does not fit is an error in itself);
    a rejected blob is loaded again with a log, grown until the kernel's
    reason fits.  Raises ``OSError`` when the kernel cannot be asked (no
    bpf(2), no permission) and ``NotImplementedError`` for split BTF.
    """
    if base is not None:
        raise NotImplementedError(
            'the kernel checks split BTF only when it loads a module: BPF_BTF_LOAD '
            'takes no base BTF, not even when the base is /sys/kernel/btf/vmlinux')
    fd, err, _ = _btf_load(data, None)
    if fd >= 0:
        os.close(fd)
        return LoadResult(True, 0, '')
    if err in (errno.EPERM, errno.ENOSYS, errno.EFAULT):
        raise OSError(err, f'BPF_BTF_LOAD: {os.strerror(err)}')
    return LoadResult(False, err, _rejection_log(data, log_size))


def _rejection_log(data: bytes, size: int) -> str:
    """The verifier log of a rejected blob, in a buffer grown until it fits."""
    while True:
        log = ctypes.create_string_buffer(size)
        fd, err, true_size = _btf_load(data, log)
        if fd >= 0:
            os.close(fd)
        if err != errno.ENOSPC or size >= MAX_LOG_SIZE:
            return log.value.decode('utf-8', 'replace')
        size = min(MAX_LOG_SIZE, max(true_size + 1, size * 4))


def _btf_load(data: bytes, log: ctypes.Array | None) -> tuple[int, int, int]:
    """(fd or -1, errno, log size the kernel needed) of one BPF_BTF_LOAD."""
    buf = ctypes.create_string_buffer(bytes(data), len(data))
    attr = BtfLoadAttr(btf=ctypes.addressof(buf), btf_size=len(data))
    if log is not None:
        attr.btf_log_buf = ctypes.addressof(log)
        attr.btf_log_size = len(log)
        attr.btf_log_level = LOG_LEVEL
    fd = _libc.syscall(_syscall_number(), BPF_BTF_LOAD, ctypes.byref(attr),
                       ctypes.sizeof(attr))
    err = ctypes.get_errno() if fd < 0 else 0
    return fd, err, attr.btf_log_true_size


def _syscall_number() -> int:
    machine = platform.machine()
    try:
        return BPF_SYSCALL[machine]
    except KeyError:
        raise OSError(errno.ENOSYS, f'no bpf(2) system call number known for {machine}') \
            from None
