"""Read raw BTF bytes (a .BTF section or a .btf file) into a ``Btf``."""
from __future__ import annotations

import functools
import struct
import sys
from array import array

from .errors import BtfError
from .kinds import (
    Kind, extra_len, ARRAY as _ARRAY, ENUM as _ENUM, ENUM64 as _ENUM64,
    FUNC_PROTO as _FUNC_PROTO, INT as _INT, STRUCT as _STRUCT, UNION as _UNION,
)
from .strings import StringReader
from .types import Btf, BtfType, Enumerator, Head, Member, Param, VarSecinfo, gc_paused

#: Builds an entry from a tuple of its fields, without the namedtuple's
#: Python-level ``__new__``.
_new = tuple.__new__


def byteorder_of(data: bytes) -> str:
    """'little' or 'big' from the magic, or raise BtfError."""
    if len(data) < 4:
        raise BtfError('too short for a BTF header')
    magic = bytes(data[0:2])
    if magic == b'\x9f\xeb':
        return 'little'
    if magic == b'\xeb\x9f':
        return 'big'
    raise BtfError(f'bad magic 0x{magic[0]:02x}{magic[1]:02x}, not BTF')


def read_header(data: bytes) -> tuple[str, int, int, int, int, int]:
    """(byteorder, hdr_len, type_off, type_len, str_off, str_len) of a blob."""
    order = byteorder_of(data)
    fmt = ('<' if order == 'little' else '>') + 'HBBIIIII'
    if len(data) < struct.calcsize(fmt):
        raise BtfError('too short for a BTF header')
    _magic, version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
        struct.unpack_from(fmt, data)
    if version != 1:
        raise BtfError(f'unsupported BTF version {version}')
    if hdr_len < 24 or hdr_len > len(data):
        raise BtfError(f'bad header length {hdr_len}')
    end = len(data) - hdr_len
    if type_off + type_len > end or str_off + str_len > end:
        raise BtfError(f'sections run past the end of the data '
                       f'(types {type_off}+{type_len}, strings {str_off}+{str_len}, '
                       f'{end} bytes after the header)')
    return order, hdr_len, type_off, type_len, str_off, str_len


def blob_size(data: bytes, pos: int = 0) -> int:
    """Total length of the BTF blob starting at ``pos`` (header + sections)."""
    with memoryview(data) as view:       # no copy of what follows the blob
        _, hdr_len, type_off, type_len, str_off, str_len = read_header(view[pos:])
    return hdr_len + max(type_off + type_len, str_off + str_len)


def parse_btf(data: bytes, base: Btf | None = None, shift: int = 0,
              offsets: list[int] | None = None) -> Btf:
    """Parse a BTF blob; with ``base`` it is split BTF on top of it.

    ``shift`` is added to every non-void type id the blob refers to: the link
    concatenates blobs this way without a second pass over their types.
    ``offsets``, if given, receives the byte offset of each own type in the
    type section, as ``encode_btf`` gives them.

    The blob is checked whole here (a broken one raises BtfError now), but
    each type is only built when first used: see ``Btf``.
    """
    order, hdr_len, type_off, type_len, str_off, str_len = read_header(data)
    e = '<' if order == 'little' else '>'
    body = hdr_len
    strdata = data[body + str_off: body + str_off + str_len]
    if base is not None and base.strings is None:
        raise BtfError('the base BTF was not read from bytes')
    if strdata[:1] not in (b'', b'\0') and base is None:
        raise BtfError('the string section does not start with NUL')
    strings = StringReader(strdata, base.strings if base is not None else None)
    parser = TypeParser(data[body + type_off: body + type_off + type_len], e, strings, shift)
    first_id = base.next_id if base is not None else 1
    with gc_paused():
        section = _Section(parser, first_id, order, void=base is None)
    if offsets is not None:
        offsets += section.offsets
    return Btf.lazy(len(section.offsets), section, base, order, strings)


class TypeParser:
    """Decodes single types of one blob's type section.

    ``shift`` is added to every non-void type id a type refers to.
    """

    def __init__(self, tdata: bytes, e: str, name: StringReader, shift: int = 0):
        self.tdata = tdata
        self.name = name
        self.shift = shift
        self._head, self._u32, self._i32, self._triples, self._pairs = _unpackers(e)

    def parse(self, pos: int, type_id: int) -> tuple[BtfType, int]:
        """The type at byte ``pos`` (its id is for messages), and where the next starts."""
        tdata = self.tdata
        n = len(tdata)
        if pos + 12 > n:
            raise BtfError(f'type {type_id} truncated at byte {pos}')
        name_off, info, st = self._head(tdata, pos)
        kind_no = (info >> 24) & 0x1f
        spec = _SPECS[kind_no]
        if spec is None:
            raise BtfError(f'type {type_id} has unknown kind {kind_no}')
        kind, fixed, per, body = spec
        try:
            name = self.name[name_off]
        except ValueError as err:
            raise BtfError(f'type {type_id}: {err}') from None
        vlen = info & 0xffff
        end = pos + 12 + fixed + per * vlen
        if end > n:
            raise BtfError(f'type {type_id} ({kind.name}) truncated')
        if vlen and kind not in _VLEN_KINDS:
            raise BtfError(f'type {type_id} ({kind.name}): vlen {vlen} must be 0')
        if kind is _INT:
            (v,) = self._u32(tdata, pos + 12)
            if v & 0xf000ff00:
                raise BtfError(f'type {type_id} (INT): reserved bits set in 0x{v:08x}')
        return body(self, kind, name, info >> 31, vlen, st, pos + 12, end), end

    # One per kind: (kind, name, kflag, vlen, header word, where the extra
    # data starts and ends) -> the type.  They give BtfType its fields by
    # position (kind, name, size, type, kflag, encoding, bit_offset, bits,
    # index_type, nelems, linkage, component_idx, items): keywords cost a
    # third more per type.

    def _sized(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
               end: int) -> BtfType:
        return BtfType(kind, name, st, 0, kflag)

    def _one_ref(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
                 end: int) -> BtfType:
        return BtfType(kind, name, 0, st + self.shift if st else 0, kflag)

    def _func(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
              end: int) -> BtfType:
        return BtfType(kind, name, 0, st + self.shift if st else 0, kflag, 0, 0, 0, 0, 0, vlen)

    def _int(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
             end: int) -> BtfType:
        (v,) = self._u32(self.tdata, pos)
        return BtfType(kind, name, st, 0, kflag, (v >> 24) & 0x0f, (v >> 16) & 0xff, v & 0xff)

    def _array(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
               end: int) -> BtfType:
        shift = self.shift
        at, ai, nelems = self._head(self.tdata, pos)
        return BtfType(kind, name, 0, at + shift if at else 0, kflag, 0, 0, 0,
                       ai + shift if ai else 0, nelems)

    def _struct(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
                end: int) -> BtfType:
        names, shift = self.name, self.shift
        raw = self._triples(self.tdata[pos:end])
        if kflag:
            items = [_new(Member, (names[mn], mt + shift if mt else 0, mo & 0xffffff, mo >> 24))
                     for mn, mt, mo in raw]
        else:
            items = [_new(Member, (names[mn], mt + shift if mt else 0, mo, 0))
                     for mn, mt, mo in raw]
        return BtfType(kind, name, st, 0, kflag, 0, 0, 0, 0, 0, 0, -1, tuple(items))

    def _enum(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
              end: int) -> BtfType:
        names = self.name
        raw = self._pairs(self.tdata[pos:end])
        if kflag:
            items = [_new(Enumerator, (names[en], ev - (1 << 32) if ev >= 1 << 31 else ev))
                     for en, ev in raw]
        else:
            items = [_new(Enumerator, (names[en], ev)) for en, ev in raw]
        return BtfType(kind, name, st, 0, kflag, 0, 0, 0, 0, 0, 0, -1, tuple(items))

    def _enum64(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
                end: int) -> BtfType:
        names = self.name
        items = []
        for en, lo, hi in self._triples(self.tdata[pos:end]):
            ev = hi << 32 | lo
            if kflag and ev >= 1 << 63:
                ev -= 1 << 64
            items.append(_new(Enumerator, (names[en], ev)))
        return BtfType(kind, name, st, 0, kflag, 0, 0, 0, 0, 0, 0, -1, tuple(items))

    def _func_proto(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
                    end: int) -> BtfType:
        names, shift = self.name, self.shift
        items = tuple([_new(Param, (names[pn], pt + shift if pt else 0))
                       for pn, pt in self._pairs(self.tdata[pos:end])])
        return BtfType(kind, name, 0, st + shift if st else 0, kflag, 0, 0, 0, 0, 0, 0, -1, items)

    def _var(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
             end: int) -> BtfType:
        (linkage,) = self._u32(self.tdata, pos)
        return BtfType(kind, name, 0, st + self.shift if st else 0, kflag, 0, 0, 0, 0, 0, linkage)

    def _datasec(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
                 end: int) -> BtfType:
        shift = self.shift
        items = tuple([_new(VarSecinfo, (vt + shift if vt else 0, vo, vs))
                       for vt, vo, vs in self._triples(self.tdata[pos:end])])
        return BtfType(kind, name, st, 0, kflag, 0, 0, 0, 0, 0, 0, -1, items)

    def _decl_tag(self, kind: Kind, name: str, kflag: int, vlen: int, st: int, pos: int,
                  end: int) -> BtfType:
        (component_idx,) = self._i32(self.tdata, pos)
        return BtfType(kind, name, 0, st + self.shift if st else 0, kflag, 0, 0, 0, 0, 0, 0,
                       component_idx)


def _parse_specs() -> list:
    """Per kind number, what ``TypeParser.parse`` needs (None: no such
    kind): the kind, its extra bytes fixed and per vlen entry, and the
    method that builds it."""
    p = TypeParser
    bodies = {Kind.INT: p._int, Kind.ARRAY: p._array, Kind.STRUCT: p._struct,
              Kind.UNION: p._struct, Kind.ENUM: p._enum, Kind.ENUM64: p._enum64,
              Kind.FUNC_PROTO: p._func_proto, Kind.VAR: p._var, Kind.DATASEC: p._datasec,
              Kind.DECL_TAG: p._decl_tag, Kind.FUNC: p._func}
    return [None if k is None else
            (k, *_LAYOUT[k], bodies.get(k, p._sized if k in _SIZED else p._one_ref))
            for k in _KINDS]


@functools.cache
def _unpackers(e: str) -> tuple:
    """Header, u32, i32, triples and pairs readers in byte order ``e``."""
    return (struct.Struct(e + 'III').unpack_from, struct.Struct(e + 'I').unpack_from,
            struct.Struct(e + 'i').unpack_from, struct.Struct(e + 'III').iter_unpack,
            struct.Struct(e + 'II').iter_unpack)


class _Section:
    """A blob's type section, scanned once: where each type starts and its
    head.  The scan checks all that parsing checks, so parsing a type later
    cannot fail."""

    def __init__(self, parser: TypeParser, first_id: int, order: str, void: bool):
        self.parser = parser
        self.first_id = first_id
        self.void = int(void)           # whether its table's types start with void
        self.offsets: list[int] = []
        self._heads: list[Head] = []
        self._scan(order)

    def parse(self, index: int) -> BtfType:
        """The type at ``index`` of its table's ``types``."""
        i = index - self.void
        return self.parser.parse(self.offsets[i], self.first_id + i)[0]

    def heads(self) -> list[Head]:
        return self._heads

    def _scan(self, order: str) -> None:
        """Walks the headers, as 32-bit words (every type is a whole number of
        them); a type that may be broken is parsed, to raise parsing's own
        error."""
        parser = self.parser
        tdata, names, shift = parser.tdata, parser.name, parser.shift
        nw = len(tdata) >> 2
        words = array(_U32, tdata[:nw << 2])
        if order != sys.byteorder:
            words.byteswap()
        words = words.tolist()
        names.load_all()
        limit = names.valid_below()
        add_offset, add_head = self.offsets.append, self._heads.append
        w, type_id = 0, self.first_id
        while w < nw:
            if w + 3 > nw:
                parser.parse(w << 2, type_id)
            name_off, info, st = words[w], words[w + 1], words[w + 2]
            vlen = info & 0xffff
            layout = _SCAN[(info >> 24) & 0x1f]
            if layout is None:
                parser.parse(w << 2, type_id)
            kind, fixed, per, stride, max_vlen, shifted = layout
            end = w + 3 + fixed + per * vlen
            if (end > nw or name_off >= limit or vlen > max_vlen
                    or (stride and vlen and max(words[w + 3:end:stride]) >= limit)
                    or (kind is _INT and words[w + 3] & 0xf000ff00)):
                parser.parse(w << 2, type_id)
            if kind is _ARRAY:
                st, detail = words[w + 3], words[w + 5]
            elif kind is _FUNC_PROTO:
                detail = tuple(words[w + 4:end:2])
                if shift:
                    detail = tuple([t + shift if t else 0 for t in detail])
            else:
                detail = 0
            add_offset(w << 2)
            add_head((kind, names[name_off], st + shift if st and shifted else st, vlen, detail))
            w = end
            type_id += 1
        if w << 2 < len(tdata):
            parser.parse(w << 2, type_id)


_KINDS = [Kind(i) if i in Kind._value2member_map_ else None for i in range(32)]
_SIZED = frozenset({Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.DATASEC,
                    Kind.FLOAT, Kind.ENUM64})
_VLEN_KINDS = frozenset({Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64,
                         Kind.FUNC_PROTO, Kind.DATASEC, Kind.FUNC})
#: Per kind: bytes after the common header, and more bytes per vlen entry.
_LAYOUT = {k: (extra_len(k, 0), extra_len(k, 1) - extra_len(k, 0)) for k in Kind}


def _scan_layout(kind: Kind | None) -> tuple | None:
    """What the scan needs of a kind: the kind, its extra 32-bit words fixed
    and per entry, the stride of entry names (0: none), the largest vlen,
    and whether its header word is a type id."""
    if kind is None:
        return None
    fixed, per = _LAYOUT[kind]
    stride = (3 if kind in (_STRUCT, _UNION, _ENUM64)
              else 2 if kind in (_ENUM, _FUNC_PROTO) else 0)
    return (kind, fixed >> 2, per >> 2, stride, 0xffff if kind in _VLEN_KINDS else 0,
            kind not in _SIZED)


_SCAN = [_scan_layout(k) for k in _KINDS]
_SPECS = _parse_specs()
_U32 = next(code for code in 'IL' if array(code).itemsize == 4)
