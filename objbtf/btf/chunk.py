"""The ``.BTF.objbtf`` section: what the link needs beside each object's .BTF.

One chunk per object, in the target's byte order; ld concatenates the chunks
of all objects like the .BTF blobs, in the same order, each 8-aligned.
Version 3:

    0   char magic[4] = "OBTF"
    4   u16  version = 3      the layout of the chunk (this docstring)
    6   u16  hash_scheme      btf/hashing.py's HASH_SCHEME when the hashes were made
    8   u32  size             of the whole chunk, padding included (a multiple of 8)
    12  u32  name_len         bytes of the name, without padding
    16  u32  count            types described (ids 1..count of the blob)
    20  u32  btf_size         size of the .BTF blob described
    24  char name[name_len]   the object: its path as given to `objbtf encode`
                              (`objbtf cc`: the -o), zero-padded to a multiple of 8
        u64  hash[count]      structural hash of each type (btf/hashing.py)
        u32  offset[count]    byte offset of each type in the blob's type section
        u8   flags[count]     bit 0: never merge before dedup
        zero padding to a multiple of 8
        u32  facts_len        bytes of the function facts that follow
        facts                 what DWARF says of the object's functions and the
                              link needs (objbtf/functions.py): per name, in name
                              order, a flag byte and the name, NUL-terminated
        zero padding to a multiple of 8

An object that objbtf encoded but that has no types (assembly, -g0) gets a
chunk with count 0 and btf_size 0, and no .BTF blob: it tells the link that
the object went through objbtf and has nothing to contribute.

Later versions keep the 24-byte header and the name where they are, so that
any objbtf can name, and step over, a chunk it cannot read.  Version 2 had
no function facts; version 1 had a 16-byte header (magic, version, u16 0,
count, btf_size) and no name.
"""
from __future__ import annotations

import os
import struct
import sys
from array import array

from ..functions import decode_facts, encode_facts
from .errors import BtfError
from .hashing import HASH_SCHEME

SECTION = '.BTF.objbtf'
MAGIC = b'OBTF'
VERSION = 3
_HEADER = struct.Struct('4sHHIIII')         # magic .. btf_size, without the byte order
_V1_HEADER = 16


class Chunk:
    """One object's chunk.

    ``hashes``, ``offsets``, ``flags`` and ``facts`` (function name ->
    FACT_* bits, as ``raw_facts`` in the chunk) are read only from a chunk
    this objbtf can use (``usable``); ``name`` is None for a version 1
    chunk, ``position`` is where the chunk starts in the section.
    """
    __slots__ = ('btf_size', 'count', 'facts', 'flags', 'hashes', 'name', 'offsets',
                 'position', 'raw_facts', 'scheme', 'version')

    def __init__(self, name: str | None, version: int, scheme: int | None, position: int,
                 count: int, btf_size: int, hashes: array | None = None,
                 offsets: array | None = None, flags: bytes = b'', raw_facts: bytes = b''):
        self.name = name
        self.version = version
        self.scheme = scheme
        self.position = position
        self.count = count
        self.btf_size = btf_size
        self.hashes = hashes if hashes is not None else array('Q')
        self.offsets = offsets if offsets is not None else array('I')
        self.flags = flags
        self.raw_facts = raw_facts
        self.facts = decode_facts(raw_facts)

    @property
    def usable(self) -> bool:
        """Written in this format, with this hashing: its hashes can be merged."""
        return self.version == VERSION and self.scheme == HASH_SCHEME

    @property
    def has_btf(self) -> bool:
        """The object has a .BTF blob (it had types)."""
        return self.btf_size > 0


def encode_chunk(name: str, hashes: list[int], offsets: list[int], flags: bytes,
                   btf_size: int, byteorder: str, facts: dict[str, int] | None = None) -> bytes:
    """The chunk for the object ``name``; ``hashes`` and ``flags`` are indexed
    by type id (index 0, void, is left out), ``offsets`` by id - 1; ``facts``
    are its functions' (objbtf/functions.py)."""
    count = len(offsets)
    e = '<' if byteorder == 'little' else '>'
    raw_name = os.fsencode(name)
    h = array('Q', hashes[1:])
    o = array('I', offsets)
    if byteorder != sys.byteorder:
        h.byteswap()
        o.byteswap()
    tables = h.tobytes() + o.tobytes() + bytes(flags[1:])
    raw_facts = encode_facts(facts or {})
    tail = struct.pack(e + 'I', len(raw_facts)) + raw_facts
    size = _HEADER.size + _padded(len(raw_name)) + _padded(len(tables)) + _padded(len(tail))
    header = struct.pack(e + _HEADER.format, MAGIC, VERSION, HASH_SCHEME, size,
                         len(raw_name), count, btf_size)
    return (header + raw_name + bytes(-len(raw_name) % 8)
            + tables + bytes(-len(tables) % 8) + tail + bytes(-len(tail) % 8))


def typeless_chunk(name: str, byteorder: str) -> bytes:
    """The chunk of an object that went through objbtf without types."""
    return encode_chunk(name, [0], [], b'\0', 0, byteorder)


def split_chunks(data: bytes, byteorder: str) -> list[Chunk]:
    """Every chunk of a concatenated .BTF.objbtf section, in link order,
    whatever its version (see ``Chunk.usable``)."""
    e = '<' if byteorder == 'little' else '>'
    out: list[Chunk] = []
    pos = 0
    view = memoryview(data)
    while pos + 8 <= len(data):
        if data[pos:pos + 4] != MAGIC:
            if not any(data[pos:pos + 8]):
                pos += 8
                continue
            raise BtfError(f'{SECTION}: no chunk at offset {pos}{_after(out)}')
        version = struct.unpack_from(e + 'H', data, pos + 4)[0]
        if version == 1:
            chunk, end = _read_v1(view, pos, e)
        else:
            chunk, end = _read_chunk(view, pos, e, version, out)
        out.append(chunk)
        pos = end
    return out


def _read_v1(view: memoryview, pos: int, e: str) -> tuple[Chunk, int]:
    """A version 1 chunk, enough to say what it is and step over it."""
    if pos + _V1_HEADER > len(view):
        raise BtfError(f'{SECTION}: chunk at offset {pos} is truncated')
    count, btf_size = struct.unpack_from(e + 'II', view, pos + 8)
    end = pos + _V1_HEADER + 13 * count
    return Chunk(None, 1, None, pos, count, btf_size), end + (-end % 8)


def _read_chunk(view: memoryview, pos: int, e: str, version: int,
                before: list[Chunk]) -> tuple[Chunk, int]:
    """A chunk of version 2 or later; its tables only when it is usable."""
    if pos + _HEADER.size > len(view):
        raise BtfError(f'{SECTION}: chunk at offset {pos} is truncated{_after(before)}')
    _, _, scheme, size, name_len, count, btf_size = struct.unpack_from(e + _HEADER.format,
                                                                       view, pos)
    start = pos + _HEADER.size
    tables = start + _padded(name_len)
    if size % 8 or tables > pos + size or pos + size > len(view):
        raise BtfError(f'{SECTION}: chunk at offset {pos} has a bad size ({size}){_after(before)}')
    name = os.fsdecode(bytes(view[start:start + name_len]))
    chunk = Chunk(name, version, scheme, pos, count, btf_size)
    if not chunk.usable:
        return chunk, pos + size
    facts_at = tables + _padded(13 * count)
    facts_len = (struct.unpack_from(e + 'I', view, facts_at)[0]
                 if facts_at + 4 <= pos + size else -1)
    if pos + size != facts_at + _padded(4 + facts_len) or (count == 0) != (btf_size == 0):
        raise BtfError(f'{SECTION}: the chunk of {name} at offset {pos} is inconsistent '
                       f'({count} types, {btf_size} bytes of BTF, chunk size {size})')
    try:
        chunk = Chunk(name, version, scheme, pos, count, btf_size,
                        raw_facts=bytes(view[facts_at + 4:facts_at + 4 + facts_len]))
    except (ValueError, UnicodeDecodeError):
        raise BtfError(f'{SECTION}: the chunk of {name} at offset {pos} has corrupt '
                       'function facts') from None
    chunk.hashes = array('Q')
    chunk.hashes.frombytes(view[tables:tables + 8 * count])
    chunk.offsets = array('I')
    chunk.offsets.frombytes(view[tables + 8 * count:tables + 12 * count])
    if (e == '<') != (sys.byteorder == 'little'):
        chunk.hashes.byteswap()
        chunk.offsets.byteswap()
    chunk.flags = bytes(view[tables + 12 * count:tables + 13 * count])
    return chunk, pos + size


def _after(before: list[Chunk]) -> str:
    """Where a broken chunk is, by the object before it."""
    named = [c.name for c in before if c.name]
    return f' (after the chunk of {named[-1]})' if named else ''


def _padded(n: int) -> int:
    return n + (-n % 8)
