"""libbpf's btf__dedup through ctypes, and a comparison of two type tables.

The oracle is the installed libbpf.so.1 (Debian 12: libbpf 1.1.2, the one
pahole 1.24 links against).
"""
from __future__ import annotations

import ctypes
import os
import tempfile
from collections import Counter

from objbtf.btf import Btf

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


def _checked(p: int | None, what: str) -> int:
    if not p:
        err = ctypes.get_errno()
        raise AssertionError(f'libbpf {what} failed: {os.strerror(err)} ({err})')
    return p


def _new(lib: ctypes.CDLL, raw: bytes, base: int | None) -> int:
    """A libbpf struct btf of ``raw``; split BTF goes through a file, as
    libbpf 1.1 does not export btf__new_split."""
    if base is None:
        return _checked(lib.btf__new(raw, len(raw)), 'btf__new')
    with tempfile.NamedTemporaryFile(suffix='.btf') as f:
        f.write(raw)
        f.flush()
        return _checked(lib.btf__parse_raw_split(f.name.encode(), base),
                        'btf__parse_raw_split')


def libbpf_dedup(raw: bytes, base_raw: bytes | None = None) -> bytes:
    """Raw BTF after libbpf's btf__dedup (split BTF on ``base_raw`` if given:
    the result then holds only the split part, as libbpf writes it)."""
    lib = libbpf()
    base = None
    if base_raw is not None:
        base = _checked(lib.btf__new(base_raw, len(base_raw)), 'btf__new (base)')
    try:
        btf = _new(lib, raw, base)
        try:
            err = lib.btf__dedup(btf, None)
            if err:
                raise AssertionError(f'libbpf btf__dedup failed: {os.strerror(-err)} ({err})')
            size = ctypes.c_uint32()
            data = _checked(lib.btf__raw_data(btf, ctypes.byref(size)), 'btf__raw_data')
            return ctypes.string_at(data, size.value)
        finally:
            lib.btf__free(btf)
    finally:
        if base is not None:
            lib.btf__free(base)


def kind_counts(btf: Btf) -> dict[str, int]:
    return dict(sorted(Counter(t.kind.name for _, t in btf.own()).items()))


def describe(btf: Btf, type_id: int) -> str:
    t = btf[type_id]
    return f'[{type_id}] {t!r}'


def diff_btf(ours: Btf, theirs: Btf) -> str | None:
    """None if both tables hold the same types under the same ids, else a
    description of the first difference (kind counts, then the first id
    whose types differ, both printed)."""
    mine, other = kind_counts(ours), kind_counts(theirs)
    head = '' if mine == other else f'kind counts differ:\n  ours   {mine}\n  libbpf {other}\n'
    for (i, a), (_, b) in zip(ours.own(), theirs.own()):
        if a.key() != b.key():
            return (f'{head}first different type id {i}:\n  ours   {describe(ours, i)}\n'
                    f'  libbpf {describe(theirs, i)}')
    if len(ours) != len(theirs):
        return f'{head}ours has {len(ours)} types, libbpf {len(theirs)}'
    return head or None


def assert_same_btf(ours: Btf, theirs: Btf) -> None:
    problem = diff_btf(ours, theirs)
    assert problem is None, problem


__all__ = ['assert_same_btf', 'diff_btf', 'kind_counts', 'libbpf_dedup']
