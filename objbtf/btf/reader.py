"""Read raw BTF bytes (a .BTF section or a .btf file) into a ``Btf``."""
from __future__ import annotations

import struct

from .errors import BtfError
from .kinds import Kind, extra_len
from .strings import StringReader
from .types import Btf, BtfType, Enumerator, Member, Param, VarSecinfo

_HEADER = struct.Struct('<HBBIIIII')


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
    magic, version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
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


def parse_btf(data: bytes, base: Btf | None = None, shift: int = 0) -> Btf:
    """Parse a BTF blob; with ``base`` it is split BTF on top of it.

    ``shift`` is added to every non-void type id the blob refers to: the link
    concatenates blobs this way without a second pass over their types.
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
    btf = Btf(base=base, byteorder=order, strings=strings)
    _parse_types(btf, data[body + type_off: body + type_off + type_len], e, strings, shift)
    return btf


class TypeParser:
    """Decodes single types of one blob's type section.

    ``shift`` is added to every non-void type id a type refers to.
    """

    def __init__(self, tdata: bytes, e: str, name: StringReader, shift: int = 0):
        self.tdata = tdata
        self.name = name
        self.shift = shift
        self.head = struct.Struct(e + 'III')
        self.u32 = struct.Struct(e + 'I')
        self.i32 = struct.Struct(e + 'i')
        self.triple = struct.Struct(e + 'III')
        self.pair = struct.Struct(e + 'II')

    def parse(self, pos: int, type_id: int) -> tuple[BtfType, int]:
        """The type at byte ``pos`` (its id is for messages), and where the next starts."""
        tdata, name, shift = self.tdata, self.name, self.shift
        n = len(tdata)
        if pos + 12 > n:
            raise BtfError(f'type {type_id} truncated at byte {pos}')
        name_off, info, st = self.head.unpack_from(tdata, pos)
        pos += 12
        kind_no = (info >> 24) & 0x1f
        vlen = info & 0xffff
        kflag = info >> 31
        kind = _KINDS[kind_no]
        if kind is None:
            raise BtfError(f'type {type_id} has unknown kind {kind_no}')
        try:
            t = BtfType(kind, name(name_off), kflag=kflag)
        except ValueError as err:
            raise BtfError(f'type {type_id}: {err}') from None
        need = extra_len(kind, vlen)
        if pos + need > n:
            raise BtfError(f'type {type_id} ({kind.name}) truncated')
        if vlen and kind not in _VLEN_KINDS:
            raise BtfError(f'type {type_id} ({kind.name}): vlen {vlen} must be 0')
        if kind in _SIZED:
            t.size = st
        else:
            t.type = st + shift if st else 0
        if need:
            self._extra(t, kind, vlen, kflag, pos, type_id)
        elif kind is Kind.FUNC:
            t.linkage = vlen
        return t, pos + need

    def _extra(self, t: BtfType, kind: Kind, vlen: int, kflag: int, pos: int, type_id: int) -> None:
        tdata, name, shift, triple, pair = self.tdata, self.name, self.shift, self.triple, self.pair
        if kind is Kind.INT:
            (v,) = self.u32.unpack_from(tdata, pos)
            if v & 0xf000ff00:
                raise BtfError(f'type {type_id} (INT): reserved bits set in 0x{v:08x}')
            t.encoding, t.bit_offset, t.bits = (v >> 24) & 0x0f, (v >> 16) & 0xff, v & 0xff
        elif kind is Kind.ARRAY:
            at, ai, t.nelems = triple.unpack_from(tdata, pos)
            t.type, t.index_type = at + shift if at else 0, ai + shift if ai else 0
        elif kind is Kind.STRUCT or kind is Kind.UNION:
            ms = []
            for mn, mt, mo in triple.iter_unpack(tdata[pos:pos + 12 * vlen]):
                mt = mt + shift if mt else 0
                if kflag:
                    ms.append(Member(name(mn), mt, mo & 0xffffff, mo >> 24))
                else:
                    ms.append(Member(name(mn), mt, mo, 0))
            t.items = tuple(ms)
        elif kind is Kind.ENUM:
            vals = []
            for en, ev in pair.iter_unpack(tdata[pos:pos + 8 * vlen]):
                if kflag and ev >= 1 << 31:
                    ev -= 1 << 32
                vals.append(Enumerator(name(en), ev))
            t.items = tuple(vals)
        elif kind is Kind.ENUM64:
            vals = []
            for en, lo, hi in triple.iter_unpack(tdata[pos:pos + 12 * vlen]):
                ev = hi << 32 | lo
                if kflag and ev >= 1 << 63:
                    ev -= 1 << 64
                vals.append(Enumerator(name(en), ev))
            t.items = tuple(vals)
        elif kind is Kind.FUNC_PROTO:
            t.items = tuple(Param(name(pn), pt + shift if pt else 0)
                            for pn, pt in pair.iter_unpack(tdata[pos:pos + 8 * vlen]))
        elif kind is Kind.VAR:
            (t.linkage,) = self.u32.unpack_from(tdata, pos)
        elif kind is Kind.DATASEC:
            t.items = tuple(VarSecinfo(vt + shift if vt else 0, vo, vs) for vt, vo, vs in
                            triple.iter_unpack(tdata[pos:pos + 12 * vlen]))
        elif kind is Kind.DECL_TAG:
            (t.component_idx,) = self.i32.unpack_from(tdata, pos)


def _parse_types(btf: Btf, tdata: bytes, e: str, name: StringReader, shift: int) -> None:
    parser = TypeParser(tdata, e, name, shift)
    add = btf.types.append
    pos = 0
    type_id = btf.next_id
    n = len(tdata)
    while pos < n:
        t, pos = parser.parse(pos, type_id)
        add(t)
        type_id += 1


_KINDS = [Kind(i) if i in Kind._value2member_map_ else None for i in range(32)]
_SIZED = frozenset({Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.DATASEC,
                    Kind.FLOAT, Kind.ENUM64})


_VLEN_KINDS = frozenset({Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64,
                         Kind.FUNC_PROTO, Kind.DATASEC, Kind.FUNC})


