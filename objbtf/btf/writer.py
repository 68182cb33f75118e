"""Serialize a ``Btf`` to the raw BTF format the kernel and libbpf read."""
from __future__ import annotations

import struct

from .errors import BtfError
from .kinds import BTF_HEADER_LEN, BTF_MAGIC, SIZED_KINDS, Kind, extra_len
from .strings import StringTable
from .types import Btf, BtfType


def encode_btf(btf: Btf, offsets: list[int] | None = None) -> bytes:
    """The raw BTF blob of ``btf``: header, type section, string section.

    Strings are laid out in order of first use, so equal tables give equal
    bytes.  Split BTF refers to its base's strings where the base has them.
    ``offsets``, if given, receives each own type's offset in the type
    section, in id order (the encoder places relocations with them).
    """
    e = '<' if btf.byteorder == 'little' else '>'
    if btf.base is not None:
        base = btf.base.strings
        if base is None:
            raise BtfError('split BTF needs a base read from bytes')
        strings = StringTable(base.offsets(), base.end)
    else:
        strings = StringTable()
    out = bytearray()
    for type_id, t in btf.own():
        if offsets is not None:
            offsets.append(len(out))
        _encode_type(out, t, e, strings.add, type_id)
    sdata = strings.data()
    header = struct.pack(e + 'HBBIIIII', BTF_MAGIC, 1, 0, BTF_HEADER_LEN,
                  0, len(out), len(out), len(sdata))
    return header + bytes(out) + sdata


def _info(kind: Kind, vlen: int, kflag: int) -> int:
    return (kflag & 1) << 31 | (kind & 0x1f) << 24 | (vlen & 0xffff)


def _encode_type(out: bytearray, t: BtfType, e: str, name, type_id: int) -> None:
    k = t.kind
    vlen = t.vlen
    if vlen > 0xffff:
        raise BtfError(f'type {type_id} ({k.name} {t.name!r}) has {vlen} entries, '
                       'more than BTF can hold')
    # ARRAY keeps its types in struct btf_array; its header word must be 0.
    st = t.size if k in SIZED_KINDS else 0 if k is Kind.ARRAY else t.type
    out += struct.pack(e + 'III', name(t.name), _info(k, vlen, t.kflag), st)
    if k is Kind.INT:
        out += struct.pack(e + 'I', (t.encoding & 0x0f) << 24 | (t.bit_offset & 0xff) << 16
                           | (t.bits & 0xff))
    elif k is Kind.ARRAY:
        out += struct.pack(e + 'III', t.type, t.index_type, t.nelems)
    elif k in (Kind.STRUCT, Kind.UNION):
        for m in t.items:
            off = (m.bitfield_size << 24 | m.bit_offset) if t.kflag else m.bit_offset
            out += struct.pack(e + 'III', name(m.name), m.type, off)
    elif k is Kind.ENUM:
        for v in t.items:
            out += struct.pack(e + 'II', name(v.name), v.value & 0xffffffff)
    elif k is Kind.ENUM64:
        for v in t.items:
            val = v.value & 0xffffffffffffffff
            out += struct.pack(e + 'III', name(v.name), val & 0xffffffff, val >> 32)
    elif k is Kind.FUNC_PROTO:
        for p in t.items:
            out += struct.pack(e + 'II', name(p.name), p.type)
    elif k is Kind.VAR:
        out += struct.pack(e + 'I', t.linkage)
    elif k is Kind.DATASEC:
        for v in t.items:
            out += struct.pack(e + 'III', v.type, v.offset, v.size)
    elif k is Kind.DECL_TAG:
        out += struct.pack(e + 'i', t.component_idx)


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
