"""The installed libbpf.so.1 through ctypes (Debian 12: libbpf 1.1.2, the
one pahole 1.24 links against): the tests' dedup oracle, and the peer a
bench times objbtf's dedup against."""
from __future__ import annotations

import ctypes
import os

LIBBPF = '/usr/lib/x86_64-linux-gnu/libbpf.so.1'


def _load() -> ctypes.CDLL:
    if not os.path.exists(LIBBPF):
        raise AssertionError(f'{LIBBPF} is missing: install Debian 12 libbpf1 (libbpf 1.1)')
    lib = ctypes.CDLL(LIBBPF, use_errno=True)
    ptr, u32p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)
    lib.btf__new.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    lib.btf__new.restype = ptr
    lib.btf__parse_raw_split.argtypes = [ctypes.c_char_p, ptr]
    lib.btf__parse_raw_split.restype = ptr
    lib.btf__dedup.argtypes = [ptr, ptr]
    lib.btf__dedup.restype = ctypes.c_int
    lib.btf__raw_data.argtypes = [ptr, u32p]
    lib.btf__raw_data.restype = ptr
    lib.btf__free.argtypes = [ptr]
    lib.btf__free.restype = None
    return lib


_lib: ctypes.CDLL | None = None


def libbpf() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib
