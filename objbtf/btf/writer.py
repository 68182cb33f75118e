"""Serialize a ``Btf`` to the raw BTF format the kernel and libbpf read."""
from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable

from .errors import BtfError
from .kinds import (
    BTF_HEADER_LEN, BTF_MAGIC, SIZED_KINDS, Kind, extra_len, ARRAY as _ARRAY,
    DATASEC as _DATASEC, DECL_TAG as _DECL_TAG, ENUM as _ENUM, ENUM64 as _ENUM64,
    FUNC as _FUNC, FUNC_PROTO as _FUNC_PROTO, INT as _INT, STRUCT as _STRUCT,
    UNION as _UNION, VAR as _VAR,
)
from .strings import StringTable
from .types import Btf, BtfType

#: Appends what follows a type's common header, as 32-bit words.
Extra = Callable[[list, BtfType, StringTable], None]


def encode_btf(btf: Btf, offsets: list[int] | None = None) -> bytes:
    """The raw BTF blob of ``btf``: header, type section, string section.

    Strings are laid out in order of first use, so equal tables give equal
    bytes.  Split BTF refers to its base's strings where the base has them.
    ``offsets``, if given, receives each own type's offset in the type
    section, in id order (the encoder places relocations with them).

    A value the format cannot hold raises struct.error (BtfError for a
    vlen over 0xffff).
    """
    e = '<' if btf.byteorder == 'little' else '>'
    if btf.base is not None:
        if btf.base.strings is None:
            raise BtfError('split BTF needs a base read from bytes')
        strings = StringTable(btf.base.strings)
    else:
        strings = StringTable()
    words: list[int] = []
    own = btf.types if btf.base is not None else btf.types[1:]
    for i, t in enumerate(own):
        if offsets is not None:
            offsets.append(len(words) << 2)
        k = t.kind
        vlen = t.linkage if k is _FUNC else len(t.items)
        if vlen > 0xffff:
            raise BtfError(f'type {btf.start_id + i} ({k.name} {t.name!r}) has {vlen} entries, '
                           'more than BTF can hold')
        # ARRAY keeps its types in struct btf_array; its header word must be 0.
        words += (strings[t.name], (t.kflag & 1) << 31 | (k & 0x1f) << 24 | (vlen & 0xffff),
                  t.size if k in SIZED_KINDS else 0 if k is _ARRAY else t.type)
        extra = _EXTRA.get(k)
        if extra is not None:
            extra(words, t, strings)
    try:
        section = array(_U32, words)
    except (OverflowError, TypeError) as err:
        raise struct.error(f'a value does not fit in its 32-bit field: {err}') from None
    if (e == '>') != (sys.byteorder == 'big'):
        section.byteswap()
    types = section.tobytes()
    sdata = strings.data()
    header = struct.pack(e + 'HBBIIIII', BTF_MAGIC, 1, 0, BTF_HEADER_LEN,
                         0, len(types), len(types), len(sdata))
    return header + types + sdata


def _int(words: list[int], t: BtfType, name: StringTable) -> None:
    words.append((t.encoding & 0x0f) << 24 | (t.bit_offset & 0xff) << 16 | (t.bits & 0xff))


def _array(words: list[int], t: BtfType, name: StringTable) -> None:
    words += (t.type, t.index_type, t.nelems)


def _members(words: list[int], t: BtfType, name: StringTable) -> None:
    if t.kflag:
        for n, mt, off, bits in t.items:
            words += (name[n], mt, bits << 24 | off)
    else:
        for n, mt, off, _ in t.items:
            words += (name[n], mt, off)


def _enum(words: list[int], t: BtfType, name: StringTable) -> None:
    for n, value in t.items:
        words += (name[n], value & 0xffffffff)


def _enum64(words: list[int], t: BtfType, name: StringTable) -> None:
    for n, value in t.items:
        value &= 0xffffffffffffffff
        words += (name[n], value & 0xffffffff, value >> 32)


def _params(words: list[int], t: BtfType, name: StringTable) -> None:
    for n, pt in t.items:
        words += (name[n], pt)


def _var(words: list[int], t: BtfType, name: StringTable) -> None:
    words.append(t.linkage)


def _datasec(words: list[int], t: BtfType, name: StringTable) -> None:
    for v in t.items:
        words += v


def _decl_tag(words: list[int], t: BtfType, name: StringTable) -> None:
    idx = t.component_idx
    if not -1 << 31 <= idx < 1 << 31:
        raise struct.error(f'component index {idx} does not fit in 32 bits')
    words.append(idx & 0xffffffff)


_EXTRA: dict[Kind, Extra] = {
    _INT: _int, _ARRAY: _array, _STRUCT: _members, _UNION: _members,
    _ENUM: _enum, _ENUM64: _enum64, _FUNC_PROTO: _params, _VAR: _var,
    _DATASEC: _datasec, _DECL_TAG: _decl_tag,
}
_U32 = next(code for code in 'IL' if array(code).itemsize == 4)


def type_offsets(btf: Btf) -> list[int]:
    """Byte offset of each own type within the type section, in id order.

    The encoder uses this to place ``.rel.BTF`` relocations on DATASEC
    entries.
    """
    offs = []
    pos = 0
    for _, t in btf.own():
        offs.append(pos)
        pos += 12 + extra_len(t.kind, t.vlen)
    return offs
