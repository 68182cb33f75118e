"""The ``.BTF.objbtf`` section: what the link needs beside each object's .BTF.

Layout (the target's byte order), one chunk per object; ld concatenates
the chunks like the .BTF blobs, in the same order, each 8-aligned:

    char magic[4] = "OBTF"; u16 version = 1; u16 reserved = 0;
    u32 count;            types described (ids 1..count of the blob)
    u32 btf_size;         size of the .BTF blob described, a cross-check
    u64 hash[count];      structural hash of each type (btf/hashing.py)
    u32 offset[count];    byte offset of each type in the blob's type section
    u8  flags[count];     bit 0: never merge before dedup
    zero padding to a multiple of 8
"""
from __future__ import annotations

import struct
from array import array

from .errors import BtfError

SECTION = '.BTF.objbtf'
MAGIC = b'OBTF'
VERSION = 1
_HEADER = 16


class Sidecar:
    """One object's chunk: per-type hash, type-section offset and flags."""
    __slots__ = ('hashes', 'offsets', 'flags', 'btf_size')

    def __init__(self, hashes: array, offsets: array, flags: bytes, btf_size: int):
        self.hashes = hashes
        self.offsets = offsets
        self.flags = flags
        self.btf_size = btf_size


def encode_sidecar(hashes: list[int], offsets: list[int], flags: bytes, btf_size: int,
                   byteorder: str) -> bytes:
    """The chunk for one object; ``hashes`` and ``flags`` are indexed by type
    id (index 0, void, is left out), ``offsets`` by id - 1."""
    count = len(offsets)
    e = '<' if byteorder == 'little' else '>'
    h = array('Q', hashes[1:])
    o = array('I', offsets)
    if byteorder != _native():
        h.byteswap()
        o.byteswap()
    body = struct.pack(e + '4sHHII', MAGIC, VERSION, 0, count, btf_size) \
        + h.tobytes() + o.tobytes() + bytes(flags[1:])
    return body + bytes(-len(body) % 8)


def split_sidecars(data: bytes, byteorder: str) -> list[Sidecar]:
    """The chunks of a concatenated .BTF.objbtf section, in link order."""
    e = '<' if byteorder == 'little' else '>'
    out = []
    pos = 0
    view = memoryview(data)
    while pos + _HEADER <= len(data):
        if data[pos:pos + 4] != MAGIC:
            if not any(data[pos:pos + 8]):
                pos += 8
                continue
            raise BtfError(f'{SECTION}: no chunk at offset {pos}')
        _, version, _, count, btf_size = struct.unpack_from(e + '4sHHII', data, pos)
        if version != VERSION:
            raise BtfError(f'{SECTION}: chunk at offset {pos} has version {version}')
        start = pos + _HEADER
        end = start + 13 * count
        if end > len(data):
            raise BtfError(f'{SECTION}: chunk at offset {pos} is truncated')
        h = array('Q')
        h.frombytes(view[start:start + 8 * count])
        o = array('I')
        o.frombytes(view[start + 8 * count:start + 12 * count])
        if byteorder != _native():
            h.byteswap()
            o.byteswap()
        out.append(Sidecar(h, o, bytes(view[start + 12 * count:end]), btf_size))
        pos = end + (-end % 8)
    return out


def _native() -> str:
    import sys
    return sys.byteorder
