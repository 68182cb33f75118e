"""The kind registry and the codec it drives, checked against libbpf.

libbpf (libbpf.so.1, through ctypes) is the oracle: its ``btf__type_by_id``
points into the type section it parsed, so the distance between two
consecutive types is the length libbpf gives a type of that kind; and it
reads and writes BTF of either byte order (``btf__set_endianness``).
"""
from __future__ import annotations

import ctypes
import importlib
import inspect
import pkgutil

import pytest

import linkdedup
import objbtf
from fixtures.btf import inputs
from libbpf import libbpf
from objbtf.btf import BtfError, encode_btf, parse_btf
from objbtf.btf.header import BtfHeader
from objbtf.btf.kinds import KINDS, TYPE_HEAD_LEN
from objbtf.btf.validate import validate_bytes
from objbtf.btf.writer import type_offsets
from objbtf.errors import ObjbtfError

BTF_LITTLE_ENDIAN, BTF_BIG_ENDIAN = 0, 1


class _Btf:
    """A libbpf ``struct btf`` of raw bytes, freed on exit."""

    def __init__(self, raw: bytes):
        self.lib = libbpf()
        self.lib.btf__new.restype = ctypes.c_void_p
        self.lib.btf__type_by_id.restype = ctypes.c_void_p
        self.lib.btf__type_by_id.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self.lib.btf__raw_data.restype = ctypes.c_void_p
        self.lib.btf__raw_data.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        self.lib.btf__set_endianness.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.lib.btf__free.argtypes = [ctypes.c_void_p]
        self.raw = raw

    def __enter__(self):
        self.btf = self.lib.btf__new(self.raw, len(self.raw))
        assert self.btf, 'libbpf btf__new rejected the blob'
        return self

    def __exit__(self, *exc):
        self.lib.btf__free(self.btf)

    def type_address(self, type_id: int) -> int:
        return self.lib.btf__type_by_id(self.btf, type_id)

    def raw_data(self, endianness: int) -> bytes:
        assert self.lib.btf__set_endianness(self.btf, endianness) == 0
        size = ctypes.c_uint32()
        return ctypes.string_at(self.lib.btf__raw_data(self.btf, ctypes.byref(size)), size.value)


def test_every_kinds_length_is_libbpfs():
    """The registry's layout of each kind gives libbpf's type lengths, and
    the writer's offsets (which place relocations) agree with both."""
    btf, _ = inputs.zoo()
    raw = encode_btf(btf)
    offsets = type_offsets(btf)
    seen = set()
    with _Btf(raw) as lb:
        first = lb.type_address(1)
        for type_id, t in btf.own():
            assert lb.type_address(type_id) - first == offsets[type_id - 1]
            if type_id + 1 < len(btf.types):
                length = lb.type_address(type_id + 1) - lb.type_address(type_id)
                assert length == TYPE_HEAD_LEN + KINDS[t.kind].extra_len(t.vlen), t
            seen.add(t.kind)
    assert seen == {i.kind for i in KINDS if i.number}, 'the zoo lacks a kind'


def test_big_endian_bytes_are_libbpfs():
    """A table written big-endian is what libbpf makes of the little-endian
    one, reads back to the same types, and checks as the same."""
    btf, _ = inputs.zoo()
    little = encode_btf(btf)
    big = encode_btf(btf, byteorder='big')
    assert big != little
    with _Btf(little) as lb:
        assert lb.raw_data(BTF_BIG_ENDIAN) == big
    with _Btf(big) as lb:
        assert lb.raw_data(BTF_LITTLE_ENDIAN) == little
    again = parse_btf(big)
    assert again.byteorder == 'big' and BtfHeader.read(big).order == 'big'
    assert [t.key() for _, t in again.own()] == [t.key() for _, t in btf.own()]
    assert encode_btf(again) == big
    assert validate_bytes(big) == validate_bytes(little) == []


def test_unencodable_values_raise_btf_error_naming_the_type():
    btf, ids = inputs.zoo()
    btf[ids['tag_member']].component_idx = 1 << 31
    with pytest.raises(BtfError, match=r"type \d+ \(DECL_TAG 'on_member'\).*32 bits"):
        encode_btf(btf)


def _modules(package) -> list:
    return [importlib.import_module(m.name) for m in
            pkgutil.walk_packages(package.__path__, package.__name__ + '.')
            if not m.name.endswith('.__main__')]


def test_every_reported_error_is_an_objbtf_error():
    """The command line catches ObjbtfError: every public exception class of
    objbtf and the link must derive from it."""
    found = []
    for module in _modules(objbtf) + _modules(linkdedup):
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, Exception) and cls.__module__ == module.__name__
                    and not name.startswith('_')):
                found.append(cls)
                assert issubclass(cls, ObjbtfError), f'{module.__name__}.{name}'
    assert len(found) >= 9
