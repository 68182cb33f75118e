"""A persistent index of the base BTF that modules are linked against.

Every module of a kernel is linked against the same vmlinux, and each link
needs the same things of its BTF: the kind of every type, the types grouped
the way dedup's candidate table loads them, structs and unions by name,
where each string is, and each type's structural hash (the encoder's,
``objbtf/btf/hashing.py``).  Deriving them means reading all of vmlinux's
42 k types, three times the work of linking a small module.  The index holds
them in one file, written once per vmlinux, which module links map and look
up in place (open-addressing hash tables): a link reads only the few
hundred entries it needs.

The file (native byte order, every section 8-aligned):

- a header: magic, the key, and where each section is;
- per base type id: kind (u8), offset of its record in the type section
  (u32), structural hash (u64);
- the base ids that dedup's table never holds (VAR, DATASEC), and the ids
  of each group;
- hash tables of 64-bit keys with a 64-bit value each: structural hash →
  the one base type with it (``premap.py``: hashes that several base types
  share, or that may not merge, are left out); named struct, union or enum
  ('struct sk_buff') → its base type (``SEVERAL`` set when there are more);
  struct or union name → the same; a dedup group → where its ids are; a
  string → its first offset.  Keys other than the hashes are 64-bit digests;
  a digest found is checked against the base (two names that share one
  would be told apart), and an index whose own keys collide is not written.

The key is a digest of the base's BTF bytes and of the code the index
depends on: an index made for another vmlinux (relinked since) or by
another objbtf is never used, but made again.  It is written atomically
(temporary file, then rename) by the first link that finds it missing or
stale, under a lock (``FILE.lock``), so that of the module links that
``make -j`` starts together one builds it and the others wait and read it.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import mmap
import os
import struct
import sys
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import blake2b
from pathlib import Path
from typing import cast

from objbtf import native_lib
from objbtf.btf import dedup as _dedup_module
from objbtf.btf import hashing as _hashing_module
from objbtf.btf.dedup import HeadGroups
from objbtf.btf.hashing import HASH_SCHEME, blob_hashes, named_aggregate
from objbtf.btf.kinds import KINDS, Kind
from objbtf.btf.header import BtfHeader, order_char
from objbtf.btf.reader import TypeParser, parse_btf
from objbtf.btf.strings import StringReader
from objbtf.btf.types import VOID, Btf, BtfType, Head, head
from objbtf.elf.writer import write_atomically

MAGIC = b'OBTFIDX1'
#: A name's value has this bit set when several base types have the name.
SEVERAL = 1 << 63
_ID_MASK = (1 << 32) - 1
_COMPOSITE = KINDS.composite
#: The sections, in file order, with their array type codes.
_SECTIONS = (('kinds', 'B'), ('offsets', 'I'), ('hashes', 'Q'), ('skipped', 'I'),
             ('group_ids', 'I'),
             ('by_hash.k', 'Q'), ('by_hash.v', 'Q'), ('by_name.k', 'Q'), ('by_name.v', 'Q'),
             ('composites.k', 'Q'), ('composites.v', 'Q'), ('groups.k', 'Q'),
             ('groups.v', 'Q'), ('strings.k', 'Q'), ('strings.v', 'Q'))
_HEADER = struct.Struct('=8s32sQ')          # magic, key, number of base ids
_PLACE = struct.Struct('=QQ')               # a section's offset and length in bytes
_HEADER_LEN = _HEADER.size + _PLACE.size * len(_SECTIONS)
#: The kinds section holds kind numbers.
_KIND_OF = [info.kind if info is not None else None for info in KINDS.by_number]


class _IndexCollision(Exception):
    """Two keys of one table share a digest: no index for this base."""


def digest(data: bytes) -> int:
    """The 64-bit digest keying names, groups and strings."""
    return int.from_bytes(blake2b(data, digest_size=8).digest(), 'little')


def group_digest(coarse: object) -> int:
    """The digest of one of dedup's group keys (a name, or a tuple of a
    kind, a name and numbers)."""
    if coarse.__class__ is tuple:
        coarse = tuple([int(x) if x.__class__ is Kind else x for x in coarse])
    return digest(repr(coarse).encode())


@functools.cache
def _code_digest() -> bytes:
    """The code an index's contents depend on: grouping (dedup), hashing
    (and its C twin, whose hashes the compiled build takes), this.  Made
    once a process: its code does not change under it, and reading the
    sources again cost each module link 1 ms."""
    h = blake2b(digest_size=16)
    for module in (_dedup_module, _hashing_module, sys.modules[__name__]):
        h.update(module_code(module.__name__))
    h.update(module_code('objbtf.btf._blob', '.c'))
    return h.digest()


def module_code(name: str, suffix: str = '.py') -> bytes:
    """The code of module ``name``: its source (``suffix``: a C
    extension's is ``.c``), found from its top package (whose
    ``__init__.py`` is never compiled), or the compiled library when
    installed without sources.  Not the module's own file: a compiled
    module's is mypyc's shim, the same bytes whatever the code, and its
    ``__file__`` depends on which module imported it first (a resident
    server's said objbtf/objbtf/btf/dedup...so, which is no file)."""
    top = sys.modules[name.partition('.')[0]].__file__
    assert top is not None          # a package's __init__.py, never compiled
    source = Path(top).parent.parent / (name.replace('.', '/') + suffix)
    if source.exists():
        return source.read_bytes()
    return Path(native_lib() or source).read_bytes()


def index_key(raw: bytes) -> bytes:
    """What an index for base BTF ``raw`` must have been made for."""
    h = blake2b(digest_size=32)
    h.update(MAGIC + sys.byteorder.encode() + HASH_SCHEME.to_bytes(4, 'little'))
    h.update(_code_digest())
    h.update(hashlib.sha256(raw).digest())
    return h.digest()


# -- making one -------------------------------------------------------------------

def build_index(raw: bytes, key: bytes) -> bytes:
    """The index file for base BTF ``raw`` (raises _IndexCollision)."""
    offsets: list[int] = []
    btf = parse_btf(raw, offsets=offsets)
    types = btf.types
    hashes, flags = blob_hashes(btf, raw)
    sections: dict[str, array] = {
        'kinds': array('B', [int(t.kind) for t in types]),
        'offsets': array('I', [0] + offsets),
        'hashes': array('Q', hashes),
    }
    groups = HeadGroups([head(VOID)] + btf.heads())
    sections['skipped'] = array('I', groups.skipped)
    group_ids = array('I')
    group_places: dict[int, int] = {}
    every = list(groups.items())
    for coarse, ids in every:
        group_places[group_digest(coarse)] = len(group_ids) << 32 | len(ids)
        group_ids.extend(ids)
    if len(group_places) != len(every):
        raise _IndexCollision('groups')
    sections['group_ids'] = group_ids
    _table(sections, 'by_hash', _unique_hashes(hashes, flags))
    names, composites = _names(types)
    _table(sections, 'by_name', names)
    _table(sections, 'composites', composites)
    _table(sections, 'groups', group_places)
    assert btf.strings is not None      # parse_btf reads the section
    _table(sections, 'strings', _first_offsets(btf.strings))
    return _layout(key, len(types), sections)


def _unique_hashes(hashes: list[int], flags: bytearray) -> dict[int, int]:
    """Structural hash → base id, for hashes exactly one base type has and
    that may merge."""
    seen: dict[int, int] = {}
    for i in range(1, len(hashes)):
        h = hashes[i]
        seen[h] = 0 if h in seen or flags[i] else i
    return {h: i for h, i in seen.items() if i}


def _names(types: list[BtfType]) -> tuple[dict[int, int], dict[int, int]]:
    """Digests of named aggregates ('struct NAME') and of struct and union
    names → the first base id with it, SEVERAL set when more have it."""
    by_name: dict[str, int] = {}
    composites: dict[str, int] = {}
    for i in range(1, len(types)):
        t = types[i]
        name = named_aggregate(t)
        if name is not None:
            by_name[name] = by_name[name] | SEVERAL if name in by_name else i
        if t.kind in _COMPOSITE:
            composites[t.name] = composites[t.name] | SEVERAL if t.name in composites else i
    return _digested(by_name), _digested(composites)


def _first_offsets(strings: StringReader) -> dict[int, int]:
    """Digest of each string of the section → its first offset, keyed as
    ``StringTable`` asks: the string as the reader decodes it, encoded."""
    data = strings.data
    ascii_only = data.isascii()
    out: dict[str, int] = {}
    off = strings.start
    for part in data.split(b'\0')[:-1]:
        text = part.decode('ascii') if ascii_only else part.decode('utf-8', 'replace')
        out.setdefault(text, off)
        off += len(part) + 1
    return _digested(out)


def _digested(table: dict[str, int]) -> dict[int, int]:
    out = {digest(name.encode()): value for name, value in table.items()}
    if len(out) != len(table):
        raise _IndexCollision('names')
    return out


def _table(sections: dict[str, array], name: str, table: dict[int, int]) -> None:
    """An open-addressing hash table (linear probing, at most half full) of
    ``table``: a key's first slot is its top bits, 0 marks a free slot."""
    if 0 in table:
        raise _IndexCollision(name)
    bits = max(4, (2 * len(table)).bit_length())
    shift, mask = 64 - bits, (1 << bits) - 1
    keys = array('Q', bytes(8 << bits))
    values = array('Q', bytes(8 << bits))
    for key, value in table.items():
        slot = key >> shift
        while keys[slot]:
            slot = (slot + 1) & mask
        keys[slot] = key
        values[slot] = value
    sections[name + '.k'] = keys
    sections[name + '.v'] = values


def _layout(key: bytes, count: int, sections: dict[str, array]) -> bytes:
    """Header, then the sections in ``_SECTIONS`` order, each 8-aligned."""
    places: list[bytes] = []
    pos = _HEADER_LEN
    for name, _ in _SECTIONS:
        pos += -pos % 8
        size = len(sections[name]) * sections[name].itemsize
        places.append(_PLACE.pack(pos, size))
        pos += size
    out = bytearray(_HEADER.pack(MAGIC, key, count) + b''.join(places))
    for name, _ in _SECTIONS:
        out += bytes(-len(out) % 8)
        out += sections[name].tobytes()
    return bytes(out)


# -- using one --------------------------------------------------------------------

class BaseIndex:
    """A mapped index and the base BTF it was made for.  ``base`` is that
    BTF as a lazy table: a type is parsed, from the offset the index gives,
    when first looked up.  Also what a split dedup needs of its base
    (``objbtf.btf.dedup.SplitBase``)."""

    def __init__(self, buf: bytes | mmap.mmap, raw: bytes):
        view = memoryview(buf)
        _magic, self.key, self.count = _HEADER.unpack_from(buf)
        self._arrays: dict[str, memoryview] = {}
        for k, (name, code) in enumerate(_SECTIONS):
            offset, length = _PLACE.unpack_from(buf, _HEADER.size + k * _PLACE.size)
            section = view[offset:offset + length]
            self._arrays[name] = section.cast(code)  # type: ignore[call-overload]
        self.hashes = self._arrays['hashes']
        self._kinds: list[Kind] | None = None
        self._tables = {}
        for name in ('by_hash', 'by_name', 'composites', 'groups', 'strings'):
            keys = self._arrays[name + '.k']
            self._tables[name] = (keys, self._arrays[name + '.v'],
                                  65 - len(keys).bit_length(), len(keys) - 1)
        self.base, self._parser = _lazy_base(raw, self._arrays['offsets'], self.count,
                                             self._tables['strings'])

    def _lookup(self, table: str, key: int) -> int | None:
        return _probe(self._tables[table], key)

    def by_hash(self, type_hash: int) -> int:
        """The one base type with this structural hash (0: none, or several)."""
        return self._lookup('by_hash', type_hash) or 0

    def named(self, name: str) -> tuple[int, bool] | None:
        """The first base type that ``named_aggregate`` calls ``name``, and
        whether others are called so too; None when none is."""
        value = self._lookup('by_name', digest(name.encode()))
        if value is None:
            return None
        first = value & _ID_MASK
        if named_aggregate(self.head(first)) != name:
            return None                      # another name with the same digest
        return first, bool(value & SEVERAL)

    def head(self, type_id: int) -> BtfType:
        """Base type ``type_id`` with only its kind, name and kind_flag
        (``TypeParser.shallow``)."""
        return self._parser.shallow(self._arrays['offsets'][type_id])

    # SplitBase

    def kinds(self) -> list[Kind]:
        """The same list each time (dedup copies it): a process may link
        many modules on one index (``pipeline._last_base``)."""
        if self._kinds is None:
            self._kinds = [cast(Kind, _KIND_OF[k]) for k in self._arrays['kinds']]
        return self._kinds

    def groups(self) -> IndexGroups:
        return IndexGroups(self)

    def composite(self, name: str) -> int | None:
        value = self._lookup('composites', digest(name.encode()))
        if value is None:
            return None
        first = value & _ID_MASK
        if self.head(first).name != name:
            return None
        return 0 if value & SEVERAL else first


class IndexGroups:
    """dedup's ``BaseGroups`` read from an index."""

    def __init__(self, index: BaseIndex):
        self._index = index
        self._ids = index._arrays['group_ids']
        self._taken: set[int] = set()
        self.skipped = index._arrays['skipped']
        self.size = index.count - 1 - len(self.skipped)

    def take(self, coarse: object) -> list[int] | None:
        key = group_digest(coarse)
        if key in self._taken:
            return None
        place = self._index._lookup('groups', key)
        if place is None:
            return None
        self._taken.add(key)
        start = place >> 32
        return self._ids[start:start + (place & _ID_MASK)].tolist()


def _probe(table: tuple[memoryview, memoryview, int, int], key: int) -> int | None:
    """The value of ``key`` in one of ``_table``'s hash tables, or None."""
    keys, values, shift, mask = table
    slot = key >> shift
    while True:
        found = keys[slot]
        if found == key:
            return values[slot]
        if not found:
            return None
        slot = (slot + 1) & mask


class _IndexedStrings(StringReader):
    """The base's string section, whose strings ``StringTable`` finds
    through the index's table of them instead of splitting the whole
    section.  It holds that table, not the index: the index holds it, and
    a cycle would leave every module link's base types to the cyclic
    garbage collector."""
    __slots__ = ('table',)
    table: tuple[memoryview, memoryview, int, int]

    def find(self, s: str) -> int | None:
        """The first offset of ``s`` in the section."""
        try:
            encoded = s.encode()
        except UnicodeEncodeError:
            return None
        off = _probe(self.table, digest(encoded))
        if off is None or self[off] != s:
            return None
        return off


class _Source:
    """Where the lazy base table parses its types: at the offsets the index holds."""

    def __init__(self, parser: TypeParser, offsets: memoryview):
        self.parser = parser
        self.offsets = offsets

    def parse(self, index: int) -> BtfType:
        return self.parser.parse(self.offsets[index], index)[0]

    def heads(self) -> list[Head]:
        return [head(self.parse(i)) for i in range(1, len(self.offsets))]


def _lazy_base(raw: bytes, offsets: memoryview, count: int,
               strings_table: tuple[memoryview, memoryview, int, int]) -> tuple[Btf, TypeParser]:
    """The base as a lazy table, and the parser of its types."""
    header = BtfHeader.read(raw)
    strings = _IndexedStrings(header.strings(raw))
    strings.table = strings_table
    # A view, not a copy of vmlinux's types: the parser reads a few hundred.
    parser = TypeParser(header.types(memoryview(raw)), order_char(header.order), strings)
    return Btf.lazy(count - 1, _Source(parser, offsets), None, header.order, strings), parser


def load_index(path: str, raw: bytes, key: bytes) -> BaseIndex | None:
    """The index in ``path`` if it was made with ``key``, else None."""
    try:
        with open(path, 'rb') as f:
            if os.fstat(f.fileno()).st_size < _HEADER_LEN:
                return None
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return None
    magic, found, _count = _HEADER.unpack_from(buf)
    if magic != MAGIC or found != key:
        buf.close()
        return None
    return BaseIndex(buf, raw)


@contextmanager
def _locked(path: str) -> Iterator[None]:
    """``path``.lock held: one link builds the index, the others wait."""
    fd = os.open(path + '.lock', os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def open_index(path: str, raw: bytes) -> BaseIndex | None:
    """The index of base BTF ``raw`` kept in ``path``, made (and written)
    first if ``path`` holds none or one for another base; None if this
    base cannot have one (digests that collide)."""
    key = index_key(raw)
    index = load_index(path, raw, key)
    if index is not None:
        return index
    with _locked(path):
        index = load_index(path, raw, key)      # made by another link meanwhile
        if index is not None:
            return index
        try:
            data = build_index(raw, key)
        except _IndexCollision:
            return None
        write_atomically(path, [data])
    return load_index(path, raw, key)
