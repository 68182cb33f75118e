"""The newest libbpf (the vendored pahole's lib/bpf, vendor/README.md),
built as a shared library once a run and called through ctypes: the
oracle for distilled base BTF.  Its ``btf__distill_base()`` is what pahole
calls for ``distilled_base``, and its ``btf__relocate()`` is the kernel's
own ``btf_relocate()`` (tools/lib/bpf/btf_relocate.c, which
kernel/bpf/btf_relocate.c includes).  Debian 12's libbpf (1.1) has
neither.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

from newest_pahole import TARBALL

_LIBBPF = f'{TARBALL.name.removesuffix(".tar.xz")}/lib/bpf'


def built(parent: Path) -> Path:
    """libbpf.so of the vendored source, built in ``parent`` unless an
    earlier run left it there (make, gcc, libelf-dev, zlib1g-dev)."""
    out = parent / 'libbpf-newest'
    lib = out / 'libbpf.so'
    if lib.exists():
        return lib
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(['tar', '-xf', str(TARBALL), '-C', tmp, _LIBBPF], check=True)
        r = subprocess.run(['make', '-C', f'{tmp}/{_LIBBPF}/src', f'-j{os.cpu_count() or 2}',
                            f'OBJDIR={out}', 'BUILD_STATIC_ONLY='],
                           capture_output=True, text=True)
        if r.returncode:
            raise AssertionError(f'the vendored libbpf does not build: {r.stderr[-2000:]}')
    return lib


class Libbpf:
    """The few calls the tests make, on raw BTF bytes."""

    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL, use_errno=True)
        ptr, u32p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)
        lib.btf__new.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
        lib.btf__new_split.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ptr]
        lib.btf__new.restype = lib.btf__new_split.restype = ptr
        lib.btf__distill_base.argtypes = [ptr, ctypes.POINTER(ptr), ctypes.POINTER(ptr)]
        lib.btf__relocate.argtypes = [ptr, ptr]
        lib.btf__distill_base.restype = lib.btf__relocate.restype = ctypes.c_int
        lib.btf__raw_data.argtypes = [ptr, u32p]
        lib.btf__raw_data.restype = ptr
        lib.btf__free.argtypes = [ptr]
        lib.btf__free.restype = None
        self.lib = lib

    def _new(self, raw: bytes, base: int | None = None) -> int:
        p = (self.lib.btf__new(raw, len(raw)) if base is None
             else self.lib.btf__new_split(raw, len(raw), base))
        if not p:
            err = ctypes.get_errno()
            raise AssertionError(f'libbpf cannot read the BTF: {os.strerror(err)}')
        return p

    def _raw(self, btf: int) -> bytes:
        size = ctypes.c_uint32()
        data = self.lib.btf__raw_data(btf, ctypes.byref(size))
        return ctypes.string_at(data, size.value)

    def distill(self, base: bytes, split: bytes) -> tuple[bytes, bytes]:
        """btf__distill_base of ``split`` (on ``base``): (the distilled base,
        the split BTF on it)."""
        b = self._new(base)
        s = self._new(split, b)
        new_base, new_split = ctypes.c_void_p(), ctypes.c_void_p()
        try:
            err = self.lib.btf__distill_base(s, ctypes.byref(new_base), ctypes.byref(new_split))
            if err:
                raise AssertionError(f'btf__distill_base failed: {os.strerror(-err)}')
            try:
                return self._raw(new_base.value), self._raw(new_split.value)
            finally:
                self.lib.btf__free(new_split.value)
                self.lib.btf__free(new_base.value)
        finally:
            self.lib.btf__free(s)
            self.lib.btf__free(b)

    def relocate(self, dist: bytes, split: bytes, base: bytes) -> bytes | None:
        """``split`` (on the distilled base ``dist``) relocated onto
        ``base`` by the kernel's rules: its raw bytes, or None where they
        refuse it."""
        d, b = self._new(dist), self._new(base)
        s = self._new(split, d)
        try:
            if self.lib.btf__relocate(s, b):
                return None
            return self._raw(s)
        finally:
            self.lib.btf__free(s)
            self.lib.btf__free(b)
            self.lib.btf__free(d)
