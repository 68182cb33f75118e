"""The codec's reader: raw BTF bytes (a .BTF section or a .btf file) into a ``Btf``.

Every kind is read as the registry (``kinds.py``) lays it out: the common
``struct btf_type``, then its fixed words, then its vlen entries.  One
decoder per layout turns the words into the model's fields; it is the only
code, with the writer's, that knows what a bit of the format means.

``parse_btf`` is strict: a broken blob raises BtfError.  ``read_leniently``
walks a type section as the kernel's verifier does and reports what is
wrong instead, for the validator.
"""
from __future__ import annotations

import functools
import struct
import sys
from array import array
from collections.abc import Callable

from .errors import BtfError
from .header import BtfHeader, order_char
from .kinds import (
    BTF_ARRAY, BTF_DECL_TAG, BTF_ENUM, BTF_ENUM64, BTF_MEMBER, BTF_PARAM, BTF_VAR,
    BTF_VAR_SECINFO, INT_DATA, KINDS, LINKAGE, SIZE, TYPE, TYPE_HEAD_LEN, ZERO, Kind,
    KindInfo, KindRegistry, ARRAY as _ARRAY, FUNC_PROTO as _FUNC_PROTO, UNKN as _UNKN,
)
from .strings import StringReader
from .types import (Btf, BtfType, Detail, Enumerator, Head, Member, Param, VarSecinfo,
                    gc_paused)

#: Builds an entry from a tuple of its fields, without the namedtuple's
#: Python-level ``__new__``.
_new = tuple.__new__


def parse_btf(data: bytes, base: Btf | None = None, shift: int = 0,
              offsets: list[int] | None = None, kinds: KindRegistry = KINDS,
              words: list[int] | None = None) -> Btf:
    """Parse a BTF blob, in either byte order; with ``base`` it is split BTF on top of it.

    ``shift`` is added to every non-void type id the blob refers to: the link
    concatenates blobs this way without a second pass over their types.
    ``offsets``, if given, receives the byte offset of each own type in the
    type section, as ``encode_btf`` gives them.  ``kinds`` is the registry
    of the kinds the blob may hold.  ``words``, if given, receives the type
    section as 32-bit words in the host's order (the check reads it so).

    The blob is checked whole here (a broken one raises BtfError now), but
    each type is only built when first used: see ``Btf``.
    """
    h = BtfHeader.read(data)
    strdata = h.strings(data)
    if base is not None and base.strings is None:
        raise BtfError('the base BTF was not read from bytes')
    if strdata[:1] not in (b'', b'\0') and base is None:
        raise BtfError('the string section does not start with NUL')
    strings = StringReader(strdata, base.strings if base is not None else None)
    parser = TypeParser(h.types(data), order_char(h.order), strings, shift, kinds)
    first_id = base.next_id if base is not None else 1
    with gc_paused():
        section = _Section(parser, strings, first_id, h.order, void=base is None, words=words)
    if offsets is not None:
        offsets += section.offsets
    return Btf.lazy(len(section.offsets), section, base, h.order, strings)


class TypeParser:
    """Decodes single types of one blob's type section.

    ``shift`` is added to every non-void type id a type refers to.
    ``tdata`` may be a view into a file the link mapped.
    """

    def __init__(self, tdata: bytes | memoryview, e: str, name: dict[int, str], shift: int = 0,
                 kinds: KindRegistry = KINDS):
        self.tdata = tdata
        self.name = name
        self.shift = shift
        self.kinds = kinds
        self._specs = _parse_specs(kinds)
        self._head, self._u32, self._i32, self._triples, self._pairs = _unpackers(e)

    def parse(self, pos: int, type_id: int) -> tuple[BtfType, int]:
        """The type at byte ``pos`` (its id is for messages), and where the next starts."""
        tdata = self.tdata
        n = len(tdata)
        if pos + 12 > n:
            raise BtfError(f'type {type_id} truncated at byte {pos}')
        name_off, info, st = self._head(tdata, pos)
        kind_no = (info >> 24) & 0x1f
        spec = self._specs[kind_no]
        if spec is None:
            raise BtfError(f'type {type_id} has unknown kind {kind_no}')
        kind, fixed, per, body, has_vlen = spec
        try:
            name = self.name[name_off]
        except BtfError as err:
            raise BtfError(f'type {type_id}: {err}') from None
        vlen = info & 0xffff
        end = pos + 12 + fixed + per * vlen
        if end > n:
            raise BtfError(f'type {type_id} ({kind.name}) truncated')
        if vlen and not has_vlen:
            raise BtfError(f'type {type_id} ({kind.name}): vlen {vlen} must be 0')
        if body is TypeParser._int:
            (v,) = self._u32(tdata, pos + 12)
            if v & _INT_RESERVED:
                raise BtfError(f'type {type_id} ({kind.name}): reserved bits set in 0x{v:08x}')
        return body(self, kind, name, info >> 31, vlen, st, pos + 12, end), end

    def shallow(self, pos: int) -> BtfType:
        """The type at byte ``pos`` (of a blob already scanned) with only what
        its first two words say: kind, name and kind_flag, without its size,
        targets or entries.  Cheaper than parsing a struct with all its
        members, for lookups by name."""
        name_off, info, _ = self._head(self.tdata, pos)
        return BtfType(self._specs[(info >> 24) & 0x1f][0], self.name[name_off], 0, 0,
                       info >> 31)

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


#: What ``struct btf_type``'s words after the header hold, per layout: the
#: decoder of each (the writer has the encoder of each).
_DECODERS: dict[tuple[str, ...], Callable] = {
    INT_DATA: TypeParser._int, BTF_ARRAY: TypeParser._array, BTF_VAR: TypeParser._var,
    BTF_DECL_TAG: TypeParser._decl_tag, BTF_MEMBER: TypeParser._struct,
    BTF_ENUM: TypeParser._enum, BTF_ENUM64: TypeParser._enum64,
    BTF_PARAM: TypeParser._func_proto, BTF_VAR_SECINFO: TypeParser._datasec,
}
#: INT data bits the format leaves unused (the kernel checks only the top 4).
_INT_RESERVED = 0xf000ff00


def decoder(info: KindInfo) -> Callable:
    """The decoder of a kind's words after ``struct btf_type``."""
    if info.vlen == LINKAGE:
        return TypeParser._func
    layout = info.fixed or info.entry
    if layout:
        return _DECODERS[layout]
    return TypeParser._one_ref if info.word == TYPE else TypeParser._sized


@functools.cache
def _parse_specs(kinds: KindRegistry) -> list:
    """Per kind number, what ``TypeParser.parse`` needs (None: no such
    kind): the kind, its extra bytes fixed and per vlen entry, the method
    that builds it, and whether vlen may be non-zero."""
    return [None if i is None else
            (i.kind, i.fixed_len, i.entry_len if i.has_vlen and i.entry else 0, decoder(i),
             i.has_vlen)
            for i in kinds.by_number]


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

    def __init__(self, parser: TypeParser, strings: StringReader, first_id: int, order: str,
                 void: bool, words: list[int] | None = None):
        self.parser = parser
        self.strings = strings          # the parser's names
        self.first_id = first_id
        self.void = int(void)           # whether its table's types start with void
        self.offsets: list[int] = []
        self._heads: list[Head] = []
        self._scan(order, words)

    def parse(self, index: int) -> BtfType:
        """The type at ``index`` of its table's ``types``."""
        i = index - self.void
        return self.parser.parse(self.offsets[i], self.first_id + i)[0]

    def heads(self) -> list[Head]:
        return self._heads

    def _scan(self, order: str, keep: list[int] | None) -> None:
        """Walks the headers, as 32-bit words (every type is a whole number of
        them), put in ``keep`` if given; a type that may be broken is parsed,
        to raise parsing's own error."""
        parser, names = self.parser, self.strings
        tdata, shift = parser.tdata, parser.shift
        scan = _scan_layouts(parser.kinds)
        nw = len(tdata) >> 2
        packed = array(_U32, tdata[:nw << 2])
        if order != sys.byteorder:
            packed.byteswap()
        words: list[int] = packed.tolist()
        if keep is not None:
            keep[:] = words
        names.load_all()
        limit = names.valid_below()
        add_offset, add_head = self.offsets.append, self._heads.append
        w, type_id = 0, self.first_id
        while w < nw:
            if w + 3 > nw:
                parser.parse(w << 2, type_id)
            name_off, info, st = words[w], words[w + 1], words[w + 2]
            vlen = info & 0xffff
            layout = scan[(info >> 24) & 0x1f]
            if layout is None:
                parser.parse(w << 2, type_id)
            kind, fixed, per, names_at, stride, max_vlen, shifted, int_data = layout
            end = w + 3 + fixed + per * vlen
            if (end > nw or name_off >= limit or vlen > max_vlen
                    or (stride and vlen and max(words[w + names_at:end:stride]) >= limit)
                    or (int_data and words[w + 3] & _INT_RESERVED)):
                parser.parse(w << 2, type_id)
            detail: Detail
            if kind is _ARRAY:
                st, detail = words[w + 3], words[w + 5]
            elif kind is _FUNC_PROTO:
                params = words[w + 4:end:2]
                detail = tuple([t + shift if t else 0 for t in params] if shift else params)
            else:
                detail = 0
            add_offset(w << 2)
            add_head((kind, names[name_off], st + shift if st and shifted else st, vlen, detail))
            w = end
            type_id += 1
        if w << 2 < len(tdata):
            parser.parse(w << 2, type_id)


@functools.cache
def _scan_layouts(kinds: KindRegistry) -> list:
    """Per kind number, what the scan needs of a kind (None: no such kind):
    the kind, its extra 32-bit words fixed and per entry, where the first
    entry name sits from the start of the type and the stride of entry
    names (0: none), the largest vlen, whether its header word is a type
    id, and whether its fixed word is INT data."""
    out: list = []
    for i in kinds.by_number:
        if i is None:
            out.append(None)
            continue
        per = i.entry_len >> 2 if i.has_vlen and i.entry else 0
        named = i.entry_name_at is not None and per
        out.append((i.kind, i.fixed_len >> 2, per,
                    3 + (i.fixed_len >> 2) + (i.entry_name_at or 0) if named else 0,
                    per if named else 0, 0xffff if i.has_vlen else 0, i.word != SIZE,
                    i.fixed == INT_DATA))
    return out


_U32 = next(code for code in 'IL' if array(code).itemsize == 4)


# ---------------------------------------------------------------------------
# The lenient mode: the kernel's first walk over a type section

#: (type id, kind name, type name as Latin-1, message)
Report = Callable[[int, str, str, str], None]
#: The bits of info the kernel knows: kind_flag, kind, vlen.
_INFO_MASK = 0x9f00ffff
#: INT data bits the kernel knows (BTF_INT_MASK).
_INT_DATA_MASK = 0x0fffffff
_MAX_NAME_OFFSET = 0xffffff


class _RawNames(dict):
    """Names by offset, decoded as Latin-1 so that their bytes survive for
    the kernel's name rules; '' for an offset outside the strings."""

    def __init__(self, strings: bytes, base_strings: bytes):
        super().__init__()
        self.strings = strings
        self.base_strings = base_strings

    def raw(self, off: int) -> bytes | None:
        """The bytes of the name at ``off``, or None when it is out of range."""
        if off > _MAX_NAME_OFFSET:
            return None
        base_len = len(self.base_strings)
        if off < base_len:
            data, pos = self.base_strings, off
        else:
            data, pos = self.strings, off - base_len
            if pos >= len(data):
                return None
        return data[pos:data.index(b'\0', pos)]

    def __missing__(self, off: int) -> str:
        raw = self.raw(off)
        name = self[off] = '' if raw is None else raw.decode('latin-1')
        return name


def read_leniently(tdata: bytes, order: str, strings: bytes, base_strings: bytes,
                   first_id: int, max_id: int, report: Report,
                   kinds: KindRegistry = KINDS) -> tuple[list[BtfType], bool]:
    """The types of a type section as the kernel's first pass walks it
    (``btf_check_all_metas``), and whether it could walk all of it.

    Problems of the fields the model drops (reserved bits, vlen of kinds
    without it, an ARRAY's size word, name offsets out of range or naming
    an empty string) go to ``report``, and the walk goes on; a type it
    cannot delimit (truncated, unknown kind, past ``max_id``) ends it.
    """
    names = _RawNames(strings, base_strings)
    parser = TypeParser(tdata, order_char(order), names, 0, kinds)
    head = struct.Struct(order_char(order) + 'III')
    types: list[BtfType] = []
    type_id, pos, end = first_id, 0, len(tdata)
    while pos < end:
        if type_id > max_id:
            report(type_id, '', '', f'more than {max_id} types')
            return types, False
        if end - pos < TYPE_HEAD_LEN:
            report(type_id, '', '', f'truncated: {end - pos} bytes left for a type')
            return types, False
        name_off, info, st = head.unpack_from(tdata, pos)
        kind_no, vlen = (info >> 24) & 0x1f, info & 0xffff
        spec = kinds.by_number[kind_no]
        if spec is None or spec.kind is _UNKN:
            report(type_id, '', '', f'unknown kind {kind_no}')
            return types, False
        need = spec.extra_len(vlen)
        if end - pos - TYPE_HEAD_LEN < need:
            report(type_id, spec.name, '', f'truncated: needs {need} more bytes')
            return types, False
        words = struct.unpack_from(f'{order_char(order)}{need >> 2}I', tdata,
                                   pos + TYPE_HEAD_LEN)
        _raw_problems(spec, names, name_off, info, st, words,
                      lambda kind, name, message: report(type_id, kind, name, message))
        t = decoder(spec)(parser, spec.kind, names[name_off], info >> 31, vlen, st,
                          pos + TYPE_HEAD_LEN, pos + TYPE_HEAD_LEN + need)
        types.append(t)
        pos += TYPE_HEAD_LEN + need
        type_id += 1
    return types, True


def _raw_problems(spec: KindInfo, names: _RawNames, name_off: int, info: int, st: int,
                  words: tuple[int, ...], report: Callable[[str, str, str], None]) -> None:
    """Reports what is wrong with one type's raw fields, in the kernel's order."""
    kind = spec.name

    def name_problem(off: int, what: str, checked: bool = True) -> None:
        raw = names.raw(off)
        if raw is None:
            report(kind, '', f'{what} offset {off} is outside the string section')
        elif off and not raw and checked:
            report(kind, '', f'{what} offset {off} points to an empty string; no name is offset 0')

    name_problem(name_off, 'name', spec.name_checked)
    name = names[name_off]
    if info & ~_INFO_MASK:
        report(kind, name, f'reserved bits set in info {info:#010x}')
    elif not spec.has_vlen and info & 0xffff:
        report(kind, name, f'vlen {info & 0xffff}, must be 0')
    elif spec.word == ZERO and st:
        report(kind, name, f'size {st}, must be 0')
    if spec.fixed == INT_DATA and words[0] & ~_INT_DATA_MASK:
        report(kind, name, f'reserved bits set in int data {words[0]:#010x}')
    if spec.entry_name_at is not None and spec.vlen is not None:
        step = len(spec.entry)
        for i in range(len(spec.fixed) + spec.entry_name_at, len(words), step):
            name_problem(words[i], spec.named_entries)
