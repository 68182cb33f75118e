"""The ``.BTF.objbtf`` section: what the link needs beside each object's .BTF.

One chunk per object, in the target's byte order; ld concatenates the chunks
of all objects like the .BTF blobs, in the same order, each 8-aligned.
Version 6:

    0   char magic[4] = "OBTF"
    4   u16  version = 6      the layout (this docstring) and the facts it records
    6   u16  hash_scheme      btf/hashing.py's HASH_SCHEME when the hashes were made
    8   u32  size             of the whole chunk, padding included (a multiple of 8)
    12  u32  name_len         bytes of the name, without padding
    16  u32  count            types described (ids 1..count of the blob)
    20  u32  btf_size         size of the .BTF blob described
    24  char name[name_len]   the object: its path as given to `objbtf encode`
                              (`objbtf cc`: the -o), zero-padded to a multiple of 8
        u32  checksum         zlib.crc32 of the chunk with this field zero, then
                              of the .BTF blob with the offset field of every
                              DATASEC entry zero (ld relocates those)
        u32  0
        u64  hash[count]      structural hash of each type (btf/hashing.py)
        u32  offset[count]    byte offset of each type in the blob's type section
        u8   flags[count]     bit 0: never merge before dedup
        zero padding to a multiple of 8
        u32  facts_len        bytes of the function facts that follow
        facts                 what DWARF says of the object's functions and the
                              link needs (objbtf/btf/function_rules.py): per name, in name
                              order, a flag byte and the name, NUL-terminated
        zero padding to a multiple of 8
        u32  source           where the types came from: FROM_DWARF (0; also an
                              object without types, and an assembly object
                              without DWARF, whose FUNCs are gas's DWARF's, read
                              from its symbols) or FROM_COMPILER_BTF (1, gcc -gbtf)
        u32  losses_len       bytes of the losses that follow
        losses                what the compiler's BTF shows it lost (LOST_* below,
                              objbtf/compiler_btf/loader.py): per type, in type order,
                              a LOST_* byte and the type's name, NUL-terminated
        zero padding to a multiple of 8

An object that objbtf encoded but that has no types (C with -g0) gets a
chunk with count 0 and btf_size 0, and no .BTF blob: it tells the link that
the object went through objbtf and has nothing to contribute.

The link trusts a chunk's hashes and offsets: two types with one hash are
merged into one.  The checksum makes sure that they are the ones the
encoder computed for this very blob: a chunk or blob damaged since (a hash
copied over another would silently give the wrong type) is an error naming
the object, and a blob that passes is the one the encoder wrote, which the
encoder checked against the kernel's rules.

Later versions keep the 24-byte header and the name where they are, so that
any objbtf can name, and step over, a chunk it cannot read.  A new
function fact is a new version too: an older chunk would not say it, and
the link would keep what a rebuilt object drops.  Version 5 had no
``source`` and losses, version 4 no
``FACT_REORDERED`` and ``FACT_OPTIMIZED_CLONE``, version 3 no checksum,
version 2 no function facts either; version 1 had a 16-byte header (magic,
version, u16 0, count, btf_size) and no name.
"""
from __future__ import annotations

import os
import re
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence

from ..errors import shown
from .function_rules import decode_facts, encode_facts
from .errors import BtfError
from .hashing import HASH_SCHEME
from .header import BtfHeader, order_char
from .kinds import KINDS, Kind

SECTION = '.BTF.objbtf'
MAGIC = b'OBTF'
VERSION = 6
#: Where an object's types came from (a chunk's ``source``).
FROM_DWARF = 0
FROM_COMPILER_BTF = 1
#: What a compiler's BTF lost, as far as its own types show it
#: (docs/dwarfless.md: GCC 12 drops every enumerator outside the 32-bit
#: signed range): an enum with no enumerators, which C does not allow (GCC
#: writes a declared one as a FWD) ...
LOST_ALL_ENUMERATORS = 1
#: ... or one of 8 bytes whose enumerators all fit in 31 bits: the value
#: that made it 8 bytes is gone.
LOST_WIDE_ENUMERATORS = 2
#: Each loss, as ``objbtf check`` says it: "lost {LOSSES[loss]} enum NAME".
LOSSES = {LOST_ALL_ENUMERATORS: 'every enumerator (all outside 32 bits) of',
          LOST_WIDE_ENUMERATORS: 'the enumerators past 32 bits of'}
_HEADER = struct.Struct('4sHHIIII')         # magic .. btf_size, without the byte order
_CHECKSUM_LEN = 8                           # u32 checksum, u32 0
_V1_HEADER = 16
_DATASEC = int(Kind.DATASEC)
_ENTRY_OFFSET = KINDS[Kind.DATASEC].entry_offset(0, 'offset')
_ENTRY_LEN = KINDS[Kind.DATASEC].entry_len
_NONZERO = re.compile(b'[^\0]')


class Chunk:
    """One object's chunk.

    ``hashes``, ``offsets``, ``flags``, ``facts`` (function name ->
    FACT_* bits, as ``raw_facts`` in the chunk), ``source`` and ``losses``
    ((LOST_*, type name) pairs) are read only from a chunk this objbtf can
    use (``usable``); ``name`` is None for a version 1 chunk, ``position``
    is where the chunk starts in the section.
    ``checksum`` is the one the chunk records, ``crc`` the checksum of the
    chunk as read, to be continued over its blob (``describes``); both are
    None for a chunk the link made itself.
    """
    __slots__ = ('btf_size', 'checksum', 'count', 'crc', 'facts', 'flags', 'hashes', 'losses',
                 'name', 'offsets', 'position', 'raw_facts', 'scheme', 'source', 'version')

    def __init__(self, name: str | None, version: int, scheme: int | None, position: int,
                 count: int, btf_size: int, hashes: array | None = None,
                 offsets: array | None = None, flags: bytes = b'', raw_facts: bytes = b'',
                 source: int = FROM_DWARF, losses: list[tuple[int, str]] | None = None):
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
        self.source = source
        self.losses = losses or []
        self.checksum: int | None = None
        self.crc: int | None = None

    @property
    def usable(self) -> bool:
        """Written in this format, with this hashing: its hashes can be merged."""
        return self.version == VERSION and self.scheme == HASH_SCHEME

    @property
    def has_btf(self) -> bool:
        """The object has a .BTF blob (it had types)."""
        return self.btf_size > 0

    @property
    def label(self) -> str | None:
        """The object's name for a message: escaped unless printable (a
        corrupt chunk's name may hold any bytes)."""
        return None if self.name is None else shown(self.name)

    def describes(self, blob: bytes | memoryview) -> bool:
        """Whether the chunk is unchanged since the encoder wrote it for
        ``blob`` (empty for an object without types), as its checksum says."""
        return self.checksum is not None and self.checksum_with(blob) == self.checksum

    def checksum_with(self, blob: bytes | memoryview) -> int | None:
        """The checksum of this chunk as read and ``blob``; None when there
        is none (a chunk the link made) or the blob is not laid out as the
        chunk says."""
        if self.crc is None:
            return None
        try:
            return _blob_crc(self.crc, blob, self.offsets, self.flags)
        except (BtfError, struct.error):
            return None


def encode_chunk(name: str, hashes: list[int], offsets: list[int], flags: bytes | bytearray,
                 blob: bytes, byteorder: str, facts: dict[str, int] | None = None,
                 source: int = FROM_DWARF, losses: Sequence[tuple[int, str]] = ()) -> bytes:
    """The chunk for the object ``name`` and its .BTF ``blob``; ``hashes``
    and ``flags`` are indexed by type id (index 0, void, is left out),
    ``offsets`` by id - 1; ``facts`` are its functions' (objbtf/btf/function_rules.py);
    ``source`` where its types came from, ``losses`` what that source lost."""
    count = len(offsets)
    e = order_char(byteorder)
    raw_name = os.fsencode(name)
    h = array('Q', hashes[1:])
    o = array('I', offsets)
    if byteorder != sys.byteorder:
        h.byteswap()
        o.byteswap()
    tables = h.tobytes() + o.tobytes() + bytes(flags[1:])
    raw_facts = encode_facts(facts or {})
    raw_losses = b''.join([bytes((lost,)) + type_name.encode() + b'\0'
                           for lost, type_name in losses])
    tail = _padding(struct.pack(e + 'I', len(raw_facts)) + raw_facts) \
        + _padding(struct.pack(e + 'II', source, len(raw_losses)) + raw_losses)
    size = (_HEADER.size + _padded(len(raw_name)) + _CHECKSUM_LEN + _padded(len(tables))
            + len(tail))
    header = struct.pack(e + _HEADER.format, MAGIC, VERSION, HASH_SCHEME, size,
                         len(raw_name), count, len(blob))
    head = header + raw_name + bytes(-len(raw_name) % 8)
    body = _padding(tables) + tail
    crc = _blob_crc(_chunk_crc(head, body), blob, offsets, flags[1:])
    return head + struct.pack(e + 'II', crc, 0) + body


def _chunk_crc(head: bytes | memoryview, body: bytes | memoryview) -> int:
    """The checksum of a chunk's bytes, its checksum field taken as zero."""
    return zlib.crc32(body, zlib.crc32(bytes(_CHECKSUM_LEN), zlib.crc32(head)))


def _blob_crc(crc: int, blob: bytes | memoryview, offsets: Sequence[int],
              flags: bytes | bytearray) -> int:
    """``crc`` continued over ``blob``, the offset field of each DATASEC entry
    taken as zero: ld writes the variables' addresses there.  The DATASECs
    are among the types ``flags`` marks never to merge, as every one is."""
    if not blob:
        return crc
    h = BtfHeader.read(blob)
    types_at = h.hdr_len + h.type_off
    e = order_char(h.order)
    pos = 0
    for flagged in _NONZERO.finditer(flags):
        record = types_at + offsets[flagged.start()]
        (info,) = struct.unpack_from(e + 'I', blob, record + 4)
        if (info >> 24) & 0x1f != _DATASEC:
            continue
        for j in range(info & 0xffff):
            field = record + _ENTRY_OFFSET + _ENTRY_LEN * j
            crc = zlib.crc32(bytes(4), zlib.crc32(blob[pos:field], crc))
            pos = field + 4
    return zlib.crc32(blob[pos:], crc)


def typeless_chunk(name: str, byteorder: str) -> bytes:
    """The chunk of an object that went through objbtf without types."""
    return encode_chunk(name, [0], [], b'\0', b'', byteorder)


def split_chunks(data: bytes | memoryview, byteorder: str) -> list[Chunk]:
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
    checksum_at = tables
    tables += _CHECKSUM_LEN
    facts_at = tables + _padded(13 * count)
    end = pos + size
    # (a length of -1: its field is past the end, and so the chunk inconsistent)
    facts_len = struct.unpack_from(e + 'I', view, facts_at)[0] if facts_at + 4 <= end else -1
    losses_at = facts_at + _padded(4 + facts_len)
    source, losses_len = (struct.unpack_from(e + 'II', view, losses_at)
                          if facts_len >= 0 and losses_at + 8 <= end else (FROM_DWARF, -1))
    if end != losses_at + _padded(8 + losses_len) or (count == 0) != (btf_size == 0):
        raise BtfError(f'{SECTION}: the chunk of {chunk.label} at offset {pos} is '
                       f'inconsistent ({count} types, {btf_size} bytes of BTF, chunk size {size})')
    try:
        chunk = Chunk(name, version, scheme, pos, count, btf_size,
                      raw_facts=bytes(view[facts_at + 4:facts_at + 4 + facts_len]),
                      source=source, losses=_decode_losses(
                          bytes(view[losses_at + 8:losses_at + 8 + losses_len])))
    except (ValueError, UnicodeDecodeError):
        raise BtfError(f'{SECTION}: the chunk of {chunk.label} at offset {pos} has corrupt '
                       'function facts or losses') from None
    chunk.checksum = struct.unpack_from(e + 'I', view, checksum_at)[0]
    chunk.crc = _chunk_crc(view[pos:checksum_at], view[tables:pos + size])
    chunk.hashes = array('Q')
    chunk.hashes.frombytes(view[tables:tables + 8 * count])
    chunk.offsets = array('I')
    chunk.offsets.frombytes(view[tables + 8 * count:tables + 12 * count])
    if (e == '<') != (sys.byteorder == 'little'):
        chunk.hashes.byteswap()
        chunk.offsets.byteswap()
    chunk.flags = bytes(view[tables + 12 * count:tables + 13 * count])
    return chunk, pos + size


def _decode_losses(data: bytes) -> list[tuple[int, str]]:
    """A chunk's losses, as ``encode_chunk`` wrote them; ValueError if they
    are malformed."""
    out = []
    pos = 0
    while pos < len(data):
        end = data.index(b'\0', pos + 1)
        out.append((data[pos], data[pos + 1:end].decode()))
        pos = end + 1
    return out


def _after(before: list[Chunk]) -> str:
    """Where a broken chunk is, by the object before it."""
    named = [c.label for c in before if c.name]
    return f' (after the chunk of {named[-1]})' if named else ''


def _padded(n: int) -> int:
    return n + (-n % 8)


def _padding(data: bytes) -> bytes:
    """``data`` zero-padded to a multiple of 8."""
    return data + bytes(-len(data) % 8)
