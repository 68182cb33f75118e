"""A lean DWARF .debug_info decoder for the per-object path.

It decodes only what BTF needs and keeps only the DIEs the loader uses
(types, their parameters, top-level functions and variables); of a
struct's members, an enum's values and a function type's parameters it
keeps a few values each (``ITEM_ATTRS``).
Each abbreviation is compiled once into a plan of fixed-size runs, decoded
with one ``struct.unpack_from`` each, and the few variable-length forms.
This is several times faster than a general-purpose DWARF library, which
matters because the encoder runs once per object of a kernel build.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, Literal, NamedTuple

from ..errors import ObjbtfError
from . import constants as C


class DwarfError(ObjbtfError):
    """.debug_info or .debug_abbrev that cannot be decoded."""


# Form numbers.
_F_ADDR: Final = 0x01
_F_BLOCK2: Final = 0x03
_F_BLOCK4: Final = 0x04
_F_DATA2: Final = 0x05
_F_DATA4: Final = 0x06
_F_DATA8: Final = 0x07
_F_STRING: Final = 0x08
_F_BLOCK: Final = 0x09
_F_BLOCK1: Final = 0x0a
_F_DATA1: Final = 0x0b
_F_FLAG: Final = 0x0c
_F_SDATA: Final = 0x0d
_F_STRP: Final = 0x0e
_F_UDATA: Final = 0x0f
_F_REF_ADDR: Final = 0x10
_F_REF1: Final = 0x11
_F_REF2: Final = 0x12
_F_REF4: Final = 0x13
_F_REF8: Final = 0x14
_F_REF_UDATA: Final = 0x15
_F_INDIRECT: Final = 0x16
_F_SEC_OFFSET: Final = 0x17
_F_EXPRLOC: Final = 0x18
_F_FLAG_PRESENT: Final = 0x19
_F_STRX: Final = 0x1a
_F_ADDRX: Final = 0x1b
_F_REF_SUP4: Final = 0x1c
_F_STRP_SUP: Final = 0x1d
_F_DATA16: Final = 0x1e
_F_LINE_STRP: Final = 0x1f
_F_REF_SIG8: Final = 0x20
_F_IMPLICIT_CONST: Final = 0x21
_F_LOCLISTX: Final = 0x22
_F_RNGLISTX: Final = 0x23
_F_REF_SUP8: Final = 0x24
_F_STRX1: Final = 0x25
_F_STRX2: Final = 0x26
_F_STRX3: Final = 0x27
_F_STRX4: Final = 0x28
_F_ADDRX1: Final = 0x29
_F_ADDRX2: Final = 0x2a
_F_ADDRX3: Final = 0x2b
_F_ADDRX4: Final = 0x2c
_F_GNU_ADDR_INDEX: Final = 0x1f01
_F_GNU_STR_INDEX: Final = 0x1f02
_F_GNU_REF_ALT: Final = 0x1f20
_F_GNU_STRP_ALT: Final = 0x1f21

_STR_FORMS: Final = {_F_STRING, _F_STRP, _F_LINE_STRP, _F_STRX, _F_STRX1, _F_STRX2, _F_STRX3,
                     _F_STRX4, _F_GNU_STR_INDEX}
_REF_CU_FORMS: Final = {_F_REF1, _F_REF2, _F_REF4, _F_REF8, _F_REF_UDATA}
_BLOCK_FORMS: Final = {_F_BLOCK, _F_BLOCK1, _F_BLOCK2, _F_BLOCK4, _F_EXPRLOC}
_SIGNED_FORMS: Final = {_F_SDATA, _F_IMPLICIT_CONST}
_REF_FORMS: Final = _REF_CU_FORMS | {_F_REF_ADDR, _F_REF_SIG8, _F_REF_SUP4, _F_REF_SUP8,
                                     _F_GNU_REF_ALT}
#: Attributes of one class of forms (DWARF 5, 7.5.5): a name is a string, a
#: type a reference; another form means a damaged file (or strings this
#: decoder does not read: dwz's DW_FORM_GNU_strp_alt).
_FORMS_OF: Final = {
    C.AT_name: ('DW_AT_name', 'a string', _STR_FORMS),
    C.AT_type: ('DW_AT_type', 'a reference', _REF_FORMS),
    C.AT_specification: ('DW_AT_specification', 'a reference', _REF_FORMS),
    C.AT_abstract_origin: ('DW_AT_abstract_origin', 'a reference', _REF_FORMS),
}

#: Attributes the loader and the encoder read; all others are decoded only
#: to be skipped.  DW_AT_low_pc places a function's code: the encoder
#: compares it with its clones' symbols, so what matters is GCC's
#: DW_FORM_addr (an index form, clang's, has no such symbols to match).
WANTED: Final = frozenset({
    C.AT_name, C.AT_type, C.AT_byte_size, C.AT_bit_offset, C.AT_bit_size,
    C.AT_const_value, C.AT_upper_bound, C.AT_count, C.AT_data_member_location,
    C.AT_declaration, C.AT_external, C.AT_specification, C.AT_abstract_origin,
    C.AT_encoding, C.AT_data_bit_offset, C.AT_location, C.AT_str_offsets_base,
    C.AT_addr_base, C.AT_language, C.AT_loclists_base, C.AT_low_pc,
})

TYPE_TAGS: Final = frozenset({
    C.TAG_array_type, C.TAG_enumeration_type, C.TAG_pointer_type,
    C.TAG_structure_type, C.TAG_class_type, C.TAG_subroutine_type,
    C.TAG_typedef, C.TAG_union_type, C.TAG_base_type, C.TAG_const_type,
    C.TAG_volatile_type, C.TAG_restrict_type, C.TAG_unspecified_type,
    C.TAG_atomic_type,
})
#: Children kept under a kept parent.
CHILD_TAGS: Final = frozenset({
    C.TAG_member, C.TAG_enumerator, C.TAG_subrange_type, C.TAG_formal_parameter,
    C.TAG_unspecified_parameters, C.TAG_LLVM_annotation,
})
TOP_TAGS: Final = frozenset({C.TAG_subprogram, C.TAG_variable})
#: Children kept as items of their parent DIE rather than as DIEs, under
#: the parents of ``ITEM_PARENTS``: a tuple of the tag, these attributes'
#: values (None where absent), and the DIEs kept under it (clang's
#: annotations of a member; () for an abbreviation without children).  A
#: struct's members, an enum's values and a function type's parameters are
#: most of a unit's DIEs, and these few values all the loader reads of them.
ITEM_ATTRS: Final = {
    C.TAG_member: (C.AT_name, C.AT_type, C.AT_data_member_location, C.AT_data_bit_offset,
                   C.AT_bit_size, C.AT_bit_offset, C.AT_byte_size),
    C.TAG_enumerator: (C.AT_name, C.AT_const_value),
    C.TAG_formal_parameter: (C.AT_name, C.AT_type, C.AT_specification, C.AT_abstract_origin),
    C.TAG_unspecified_parameters: (),
}
#: The DIEs whose children can be items.  A function's parameters stay
#: DIEs: they are what its concrete instances' parameters name as their
#: abstract origin, and what the encoder reads their locations from.
ITEM_PARENTS: Final = frozenset({
    C.TAG_structure_type, C.TAG_class_type, C.TAG_union_type, C.TAG_enumeration_type,
    C.TAG_subroutine_type,
})
#: Where each field is in a member's item ...
I_TAG, M_NAME, M_TYPE, M_LOCATION, M_DATA_BIT_OFFSET, M_BIT_SIZE, M_BIT_OFFSET, M_BYTE_SIZE, \
    M_CHILDREN = range(9)
#: ... in an enumerator's ...
E_NAME, E_VALUE = 1, 2
#: ... and in a parameter's.
P_NAME, P_TYPE, P_SPECIFICATION, P_ABSTRACT_ORIGIN = 1, 2, 3, 4


class Expr(NamedTuple):
    """A block or exprloc value: (offset of its bytes in .debug_info, bytes)."""
    pos: int
    data: bytes


class Die:
    """A kept DIE: ``attrs`` maps DW_AT_* to converted values; ``top`` when
    its parent is the unit DIE; ``children`` the kept DIEs under it, and
    ``items`` its members, enumerators or parameters (``ITEM_ATTRS``), in
    order."""
    __slots__ = ('offset', 'tag', 'attrs', 'children', 'items', 'top')

    def __init__(self, offset: int, tag: int, attrs: dict, top: bool = False,
                 children: Sequence[Die] = (), items: Sequence[tuple] = ()):
        self.offset = offset
        self.tag = tag
        self.attrs = attrs
        self.children = children
        self.items = items
        self.top = top


def new_die(offset: int, tag: int, attrs: dict, top: bool = False,
            children: Sequence[Die] = (), items: Sequence[tuple] = ()) -> Die:
    """``Die(...)`` for the C decoder: compiled, a call that takes its
    arguments as a vector (``types.new_type`` says why)."""
    return Die(offset, tag, attrs, top, children, items)


class CompileUnit:
    """One unit: its root DIE, every kept DIE in order, and a map by offset.

    ``annotated`` says whether it has any DW_TAG_LLVM_annotation (clang's
    btf_type_tag / btf_decl_tag): without, the loader need not look.

    The C decoder (``_dies.c``) keeps the type DIEs, and the DIEs under
    them, in C: in ``types``, the object's ``_dies.Arena``, whose DIEs
    ``first_type`` to ``end_type`` are this unit's.  ``dies`` and
    ``by_offset`` then hold the others (the children of a Die here leave
    out the type DIEs under it too), and ``all_dies`` makes the whole list.
    From the Python decoder ``types`` is None.
    """
    __slots__ = ('offset', 'version', 'address_size', 'die', 'dies', 'by_offset', 'addr_base',
                 'annotated', 'types', 'first_type', 'end_type')

    def __init__(self, offset: int, version: int, address_size: int, die: Die,
                 dies: list[Die], by_offset: dict[int, Die], addr_base: int = 0,
                 annotated: bool = False, types: Any = None, first_type: int = 0,
                 end_type: int = 0):
        self.offset = offset
        self.version = version
        self.address_size = address_size
        self.die = die
        self.dies = dies
        self.by_offset = by_offset
        self.addr_base = addr_base
        self.annotated = annotated
        self.types = types
        self.first_type = first_type
        self.end_type = end_type

    def all_dies(self) -> list[Die]:
        """Every kept DIE of the unit in order, as the Python decoder lists
        them: the type DIEs kept in C made Dies too (once)."""
        if self.types is None:
            return self.dies
        return sorted([*self.dies, *self.types.dies(self.first_type, self.end_type)],
                      key=_offset)


def _offset(die: Die) -> int:
    return die.offset


class DieMap:
    """The kept DIEs of an object by offset, across its units: those made
    in Python (``python``), then those the C decoder keeps in C
    (``types``, made Dies on first use)."""
    __slots__ = ('python', 'types')

    def __init__(self, python: dict[int, Die], types: Any = None):
        self.python = python
        self.types = types

    def get(self, offset: Any) -> Die | None:
        die = self.python.get(offset)
        if die is None and self.types is not None:
            die = self.types.die(offset)
        return die


def die_map(units: list[CompileUnit]) -> DieMap:
    """Every kept DIE of ``units`` (one object's) by offset, for references
    across units: a kernel object has one unit, whose own table is that,
    not a copy of it."""
    types = units[0].types if units else None
    if len(units) == 1:
        return DieMap(units[0].by_offset, types)
    merged: dict[int, Die] = {}
    for cu in units:
        merged.update(cu.by_offset)
    return DieMap(merged, types)


class DebugSections:
    """The section contents the decoder reads, relocations already applied."""
    __slots__ = ('info', 'abbrev', 'str', 'line_str', 'str_offsets', 'addr', 'loclists',
                 'byteorder')

    def __init__(self, info: bytes, abbrev: bytes, str: bytes = b'', line_str: bytes = b'',
                 str_offsets: bytes = b'', addr: bytes = b'',
                 byteorder: Literal['little', 'big'] = 'little', loclists: bytes = b''):
        self.info = info
        self.abbrev = abbrev
        self.str = str
        self.line_str = line_str
        self.str_offsets = str_offsets
        self.addr = addr
        self.loclists = loclists      # .debug_loclists: read only for DW_FORM_loclistx
        self.byteorder = byteorder


def read_uleb(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the ULEB128 at ``pos``."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7f) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _sleb(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7f) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                result -= 1 << shift
            return result, pos


# Plan step kinds.
_FIXED: Final = 0
_ULEB: Final = 1
_SLEB: Final = 2
_CSTR: Final = 3
_BLK_ULEB: Final = 4
_BLK_FIXED: Final = 5
_CONST: Final = 6
_INDIRECT: Final = 7


class _Abbrev:
    """A compiled abbreviation: ``plan`` decodes its values (see
    ``_compile_plan``), ``extract`` picks (attr, value index, form) of the
    wanted attributes."""
    __slots__ = ('tag', 'has_children', 'plan', 'extract', 'fixed_size')

    def __init__(self, tag: int, has_children: bool, plan: tuple, extract: tuple):
        self.tag = tag
        self.has_children = has_children
        self.plan = plan
        self.extract = extract
        #: Bytes of attribute data when every form has a fixed size, else None:
        #: a DIE that is not kept is then skipped without decoding.
        self.fixed_size = (sum(step[2] for step in plan if step[0] == _FIXED)
                           if all(step[0] in (_FIXED, _CONST) for step in plan) else None)


def _fixed_fmt(form: int, addr_size: int, off_size: int, version: int) -> str | None:
    """struct format of a fixed-size form, or None if it is variable-length."""
    a = 'Q' if addr_size == 8 else 'I'
    o = 'Q' if off_size == 8 else 'I'
    table = {
        _F_ADDR: a, _F_DATA1: 'B', _F_DATA2: 'H', _F_DATA4: 'I', _F_DATA8: 'Q',
        _F_DATA16: '16s', _F_FLAG: 'B', _F_REF1: 'B', _F_REF2: 'H', _F_REF4: 'I',
        _F_REF8: 'Q', _F_REF_SIG8: 'Q', _F_STRP: o, _F_SEC_OFFSET: o,
        _F_LINE_STRP: o, _F_REF_ADDR: a if version == 2 else o, _F_STRP_SUP: o,
        _F_GNU_REF_ALT: o, _F_GNU_STRP_ALT: o, _F_STRX1: 'B', _F_STRX2: 'H',
        _F_STRX3: '3s', _F_STRX4: 'I', _F_ADDRX1: 'B', _F_ADDRX2: 'H',
        _F_ADDRX3: '3s', _F_ADDRX4: 'I', _F_REF_SUP4: 'I', _F_REF_SUP8: 'Q',
    }
    return table.get(form)


_VAR_STEPS: Final = {
    _F_UDATA: (_ULEB,), _F_REF_UDATA: (_ULEB,), _F_STRX: (_ULEB,), _F_ADDRX: (_ULEB,),
    _F_LOCLISTX: (_ULEB,), _F_RNGLISTX: (_ULEB,), _F_GNU_ADDR_INDEX: (_ULEB,),
    _F_GNU_STR_INDEX: (_ULEB,), _F_SDATA: (_SLEB,), _F_STRING: (_CSTR,),
    _F_BLOCK: (_BLK_ULEB,), _F_EXPRLOC: (_BLK_ULEB,), _F_INDIRECT: (_INDIRECT,),
}


def _compile_plan(specs, e: str, addr_size: int, off_size: int, version: int):
    """Turn (attr, form, implicit) specs into decoding steps.

    Consecutive fixed-size forms merge into one struct.Struct step.
    """
    steps = []
    run = ''
    run_n = 0

    def flush():
        nonlocal run, run_n
        if run:
            st = struct.Struct(e + run)
            steps.append((_FIXED, st, st.size))
            run, run_n = '', 0

    for _attr, form, implicit in specs:
        fmt = _fixed_fmt(form, addr_size, off_size, version)
        if fmt is not None:
            run += fmt
            run_n += 1
            continue
        flush()
        if form in _VAR_STEPS:
            steps.append(_VAR_STEPS[form])
        elif form == _F_BLOCK1:
            steps.append((_BLK_FIXED, struct.Struct(e + 'B')))
        elif form == _F_BLOCK2:
            steps.append((_BLK_FIXED, struct.Struct(e + 'H')))
        elif form == _F_BLOCK4:
            steps.append((_BLK_FIXED, struct.Struct(e + 'I')))
        elif form == _F_FLAG_PRESENT:
            steps.append((_CONST, True))
        elif form == _F_IMPLICIT_CONST:
            steps.append((_CONST, implicit))
        else:
            raise DwarfError(f'unknown attribute form 0x{form:x}')
    flush()
    return tuple(steps)


#: Compiled abbreviations by their tag, children flag, specs, byte order,
#: address and offset sizes and version: a resident worker decodes hundreds
#: of objects whose abbreviations are mostly the same (compiling them was a
#: few percent of an encode).  Emptied when it grows past _ABBREVS_KEPT.
_ABBREVS: Final[dict[tuple, _Abbrev]] = {}
_ABBREVS_KEPT: Final = 50_000


def parse_abbrevs(data: bytes, offset: int, e: str, addr_size: int, off_size: int,
                  version: int) -> dict[int, _Abbrev]:
    """The abbreviation table at ``offset`` of .debug_abbrev."""
    out: dict[int, _Abbrev] = {}
    pos = offset
    n = len(data)
    try:
        while pos < n:
            code, pos = read_uleb(data, pos)
            if code == 0:
                break
            tag, pos = read_uleb(data, pos)
            has_children = data[pos] != 0
            pos += 1
            specs = []
            while True:
                attr, pos = read_uleb(data, pos)
                form, pos = read_uleb(data, pos)
                if attr == 0 and form == 0:
                    break
                implicit = None
                if form == _F_IMPLICIT_CONST:
                    implicit, pos = _sleb(data, pos)
                specs.append((attr, form, implicit))
            key = (tag, has_children, tuple(specs), e, addr_size, off_size, version)
            ab = _ABBREVS.get(key)
            if ab is None:
                if len(_ABBREVS) >= _ABBREVS_KEPT:
                    _ABBREVS.clear()
                plan = _compile_plan(specs, e, addr_size, off_size, version)
                extract = tuple((attr, i, form) for i, (attr, form, _) in enumerate(specs)
                                if attr in WANTED)
                ab = _ABBREVS[key] = _Abbrev(tag, has_children, plan, extract)
            out[code] = ab
    except IndexError:
        raise DwarfError(f'.debug_abbrev truncated at offset {pos}') from None
    return out


class _UnitDecoder:
    """Decodes one unit's DIEs with its abbreviations and string bases."""

    def __init__(self, secs: DebugSections, cu_offset: int, version: int,
                 addr_size: int, off_size: int, abbrevs: dict[int, _Abbrev]):
        self.s = secs
        self.cu_offset = cu_offset
        self.version = version
        self.addr_size = addr_size
        self.off_size = off_size
        self.abbrevs = abbrevs
        self.e = '<' if secs.byteorder == 'little' else '>'
        self.str_offsets_base = 8 if off_size == 4 else 16
        self.addr_base = 8
        self.loclists_base = 12 if off_size == 4 else 20     # after the first list header
        self._strings: dict[int, str] = {}

    def values(self, buf: bytes, pos: int, plan) -> tuple[list, int]:
        """Decode one DIE's attribute values following ``plan``."""
        vals: list = []
        for step in plan:
            kind = step[0]
            if kind == _FIXED:
                vals.extend(step[1].unpack_from(buf, pos))
                pos += step[2]
            elif kind == _ULEB:
                b = buf[pos]
                if b < 0x80:
                    vals.append(b)
                    pos += 1
                else:
                    v, pos = read_uleb(buf, pos)
                    vals.append(v)
            elif kind == _CONST:
                vals.append(step[1])
            elif kind == _BLK_ULEB:
                ln, pos = read_uleb(buf, pos)
                vals.append(Expr(pos, buf[pos:pos + ln]))
                pos += ln
            elif kind == _SLEB:
                v, pos = _sleb(buf, pos)
                vals.append(v)
            elif kind == _CSTR:
                end = buf.index(b'\0', pos)
                vals.append(buf[pos:end])
                pos = end + 1
            elif kind == _BLK_FIXED:
                (ln,) = step[1].unpack_from(buf, pos)
                pos += step[1].size
                vals.append(Expr(pos, buf[pos:pos + ln]))
                pos += ln
            else:
                raise DwarfError('DW_FORM_indirect is not supported')
        return vals, pos

    @staticmethod
    def skip(buf: bytes, pos: int, plan) -> int:
        """Where the DIE whose values start at ``pos`` ends, without decoding them."""
        for step in plan:
            kind = step[0]
            if kind == _FIXED:
                pos += step[2]
            elif kind == _ULEB or kind == _SLEB:
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            elif kind == _BLK_ULEB:
                ln, pos = read_uleb(buf, pos)
                pos += ln
            elif kind == _CSTR:
                pos = buf.index(b'\0', pos) + 1
            elif kind == _BLK_FIXED:
                (ln,) = step[1].unpack_from(buf, pos)
                pos += step[1].size + ln
            elif kind == _INDIRECT:
                raise DwarfError('DW_FORM_indirect is not supported')
        return pos

    def converters(self, ab: _Abbrev) -> tuple:
        """(attr, value index, converter or None) for the wanted attributes.

        The converter turns a raw value into what the loader uses: a str, an
        absolute DIE offset, or an int; None keeps the value as it is.
        """
        out = []
        fn: Callable[[Any], Any] | None
        for attr, i, form in ab.extract:
            rule = _FORMS_OF.get(attr)
            if rule is not None and form not in rule[2]:
                raise DwarfError(f'{rule[0]} of a DIE of tag 0x{ab.tag:x} has form '
                                 f'0x{form:x}, not {rule[1]} form objbtf reads')
            if form in _REF_CU_FORMS:
                fn = self.cu_offset.__add__
            elif form == _F_STRP:
                fn = self.strp
            elif form in _STR_FORMS:
                fn = partial(self.string, form)
            elif form in (_F_STRX3, _F_ADDRX3):
                fn = (lambda v: int.from_bytes(v, self.s.byteorder))
            elif form == _F_LOCLISTX:
                fn = self.loclistx
            else:
                fn = None
            out.append((attr, i, fn))
        return tuple(out)

    def strp(self, off: int) -> str:
        """A .debug_str string, cached: member and type names repeat a lot."""
        s = self._strings.get(off)
        if s is None:
            s = self._strings[off] = _cstr(self.s.str, off, '.debug_str')
        return s

    def string(self, form: int, v) -> str:
        if form == _F_STRP:
            return self.strp(v)
        if form == _F_STRING:
            return v.decode('utf-8', 'replace')
        if form == _F_LINE_STRP:
            return _cstr(self.s.line_str, v, '.debug_line_str')
        if form == _F_STRX3:
            v = int.from_bytes(v, self.s.byteorder)
        off_fmt = self.e + ('I' if self.off_size == 4 else 'Q')
        where = self.str_offsets_base + v * self.off_size
        if where + self.off_size > len(self.s.str_offsets):
            raise DwarfError(f'string index {v} outside .debug_str_offsets')
        (off,) = struct.unpack_from(off_fmt, self.s.str_offsets, where)
        return _cstr(self.s.str, off, '.debug_str')

    def loclistx(self, index: int) -> int:
        """The .debug_loclists offset of this unit's location list ``index``,
        as DW_FORM_sec_offset gives it (clang uses the index form)."""
        where = self.loclists_base + index * self.off_size
        if where + self.off_size > len(self.s.loclists):
            raise DwarfError(f'location list index {index} outside .debug_loclists')
        off_fmt = self.e + ('I' if self.off_size == 4 else 'Q')
        return self.loclists_base + struct.unpack_from(off_fmt, self.s.loclists, where)[0]

    def addrx(self, index: int) -> int:
        """Offset in .debug_addr of address entry ``index`` of this unit."""
        return self.addr_base + index * self.addr_size


def _cstr(data: bytes, off: int, section: str) -> str:
    end = data.find(b'\0', off)
    if end < 0 or off >= len(data):
        raise DwarfError(f'string offset {off} outside {section}')
    return data[off:end].decode('utf-8', 'replace')


def _unit_header(info: bytes, pos: int, e: str):
    """(unit_end, version, unit_type, abbrev_offset, addr_size, off_size, die_pos)."""
    (length,) = struct.unpack_from(e + 'I', info, pos)
    off_size = 4
    hdr = pos + 4
    if length == 0xffffffff:
        (length,) = struct.unpack_from(e + 'Q', info, hdr)
        off_size = 8
        hdr += 8
    end = hdr + length
    if end > len(info):
        raise DwarfError(f'unit at 0x{pos:x} runs past the end of .debug_info')
    (version,) = struct.unpack_from(e + 'H', info, hdr)
    hdr += 2
    o = 'I' if off_size == 4 else 'Q'
    if version >= 5:
        unit_type, addr_size = info[hdr], info[hdr + 1]
        (abbrev_off,) = struct.unpack_from(e + o, info, hdr + 2)
        hdr += 2 + off_size
        if unit_type in (2, 6):          # type and split-type units
            hdr += 8 + off_size
        elif unit_type in (4, 5):        # skeleton and split-compile units
            hdr += 8
    elif version >= 2:
        unit_type = 1
        (abbrev_off,) = struct.unpack_from(e + o, info, hdr)
        addr_size = info[hdr + off_size]
        hdr += off_size + 1
    else:
        raise DwarfError(f'unit at 0x{pos:x} has unsupported DWARF version {version}')
    if addr_size not in (4, 8):
        raise DwarfError(f'unit at 0x{pos:x} has address size {addr_size}')
    return end, version, unit_type, abbrev_off, addr_size, off_size, hdr


def read_units(secs: DebugSections) -> list[CompileUnit]:
    """Decode every compile (and partial) unit of .debug_info: in C with
    the compiled build (``_dies.c``: the same units, in a third of the
    time), which leaves whatever it does not expect to ``decode_units``."""
    if _C is not None:
        units = _C.read_units(secs.info, secs.abbrev, secs.str, secs.line_str,
                              secs.str_offsets, secs.loclists, secs.byteorder == 'big')
        if units is not None:
            return units
    return decode_units(secs)


def decode_units(secs: DebugSections) -> list[CompileUnit]:
    """``read_units`` in Python: the reference decoder, and the one that
    says what is wrong with a damaged file."""
    e = '<' if secs.byteorder == 'little' else '>'
    info = secs.info
    units = []
    pos = 0
    abbrev_cache: dict[tuple, dict[int, _Abbrev]] = {}
    while pos + 11 <= len(info):
        try:
            end, version, unit_type, abbrev_off, addr_size, off_size, die_pos = \
                _unit_header(info, pos, e)
        except struct.error:
            raise DwarfError(f'unit header at 0x{pos:x} is truncated') from None
        if unit_type in (1, 3):          # compile and partial units
            key = (abbrev_off, addr_size, off_size, version)
            abbrevs = abbrev_cache.get(key)
            if abbrevs is None:
                if abbrev_off >= len(secs.abbrev):
                    raise DwarfError(f'unit at 0x{pos:x}: abbreviation offset {abbrev_off} '
                                     'outside .debug_abbrev')
                abbrevs = parse_abbrevs(secs.abbrev, abbrev_off, e, addr_size, off_size, version)
                abbrev_cache[key] = abbrevs
            dec = _UnitDecoder(secs, pos, version, addr_size, off_size, abbrevs)
            try:
                units.append(_read_unit(dec, info, die_pos, end))
            except (IndexError, struct.error, ValueError):
                raise DwarfError(f'unit at 0x{pos:x}: DIE data truncated or corrupt') from None
        pos = end
    return units


def _read_unit(dec: _UnitDecoder, info: bytes, pos: int, end: int) -> CompileUnit:
    abbrevs = dec.abbrevs
    values = dec.values
    skip = dec.skip
    converters: dict[int, tuple] = {}
    dies: list[Die] = []
    by_offset: dict[int, Die] = {}
    # The open parents: a kept Die's lists of children and items (None
    # unless ITEM_PARENTS has its tag), an item's list of children (and
    # None), or None for a DIE that is not kept.
    stack: list[tuple[list[Die], list[tuple] | None] | None] = []
    root: Die | None = None
    while pos < end:
        die_off = pos
        b = info[pos]
        if b < 0x80:
            code = b
            pos += 1
        else:
            code, pos = read_uleb(info, pos)
        if code == 0:
            if stack:
                stack.pop()
            continue
        ab = abbrevs.get(code)
        if ab is None:
            raise DwarfError(f'DIE at 0x{die_off:x} uses unknown abbreviation {code}')
        tag = ab.tag
        depth = len(stack)
        parent = stack[-1] if stack else None
        if not (tag in TYPE_TAGS
                or (parent is not None and tag in CHILD_TAGS)
                or (depth == 1 and tag in TOP_TAGS)
                or root is None):
            if ab.fixed_size is not None:
                pos += ab.fixed_size
            else:
                pos = skip(info, pos, ab.plan)
            if ab.has_children:
                stack.append(None)
            continue
        vals, pos = values(info, pos, ab.plan)
        if root is None:
            _unit_bases(dec, ab, vals)
        conv = converters.get(code)
        if conv is None:
            conv = converters[code] = dec.converters(ab)
        attrs = {attr: vals[i] if fn is None else fn(vals[i]) for attr, i, fn in conv}
        layout = ITEM_ATTRS.get(tag) if parent is not None and parent[1] is not None else None
        if layout is not None:
            assert parent is not None and parent[1] is not None
            kids: list[Die] = []
            parent[1].append((tag, *[attrs.get(a) for a in layout],
                              kids if ab.has_children else ()))
            if ab.has_children:
                stack.append((kids, None))
            continue
        if ab.has_children:
            children: list[Die] = []
            items: list[tuple] | None = [] if tag in ITEM_PARENTS else None
            die = Die(die_off, tag, attrs, depth == 1, children, () if items is None else items)
            stack.append((children, items))
        else:
            die = Die(die_off, tag, attrs, depth == 1)
        if root is None:
            root = die
        else:
            dies.append(die)
            by_offset[die_off] = die
            if parent is not None:
                parent[0].append(die)
    if pos > end:
        raise DwarfError(f'DIE data runs past the end of the unit at 0x{end:x}')
    if root is None:
        raise DwarfError('unit without a root DIE')
    annotated = any(ab.tag == C.TAG_LLVM_annotation for ab in abbrevs.values())
    return CompileUnit(dec.cu_offset, dec.version, dec.addr_size, root, dies, by_offset,
                       dec.addr_base, annotated)


def _unit_bases(dec: _UnitDecoder, ab: _Abbrev, vals: list) -> None:
    """Take DW_AT_str_offsets_base, DW_AT_addr_base, DW_AT_loclists_base
    from the unit DIE.

    They must be known before the unit DIE's own strx attributes are read.
    """
    for attr, i, _form in ab.extract:
        if attr == C.AT_str_offsets_base:
            dec.str_offsets_base = vals[i]
        elif attr == C.AT_addr_base:
            dec.addr_base = vals[i]
        elif attr == C.AT_loclists_base:
            dec.loclists_base = vals[i]


def _c_decoder() -> Any:
    """objbtf.dwarf._dies, told what this decoder keeps, when the compiled
    build runs and has it; else None."""
    from .. import c_extension
    _dies = c_extension('objbtf.dwarf._dies')
    if _dies is None:
        return None
    _dies.init(new_die, CompileUnit, Expr, TYPE_TAGS, CHILD_TAGS, TOP_TAGS, WANTED, _FORMS_OF,
               C.TAG_LLVM_annotation, ITEM_ATTRS, ITEM_PARENTS)
    return _dies


_C: Final = _c_decoder()
