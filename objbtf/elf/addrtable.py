"""``.BTF.addrs``: each variable's 64-bit address, beside an object's ``.BTF``.

A DATASEC entry's offset field has 32 bits.  On x86_64 a relocation on it
holds the low 32 bits of the variable's address, which is all a kernel
address has (-mcmodel=kernel).  Other 64-bit kernels (``Arch.wide``: arm64,
s390x) have addresses that no 32-bit relocation holds, and ld rejects the
link (``relocation truncated to fit: R_AARCH64_ABS32``).  There the offset
fields get no relocation, and this table carries an absolute 64-bit
relocation per entry instead.

One record per object that has ``.BTF``, in the target's byte order::

    u32 btf_size     the size of the object's .BTF blob
    u32 count        its DATASEC entries
    count times, in the order of the entries in the blob:
        u32 field    where the entry's offset field sits in the blob
        u32 0
        u64 address  R_<ARCH>_ABS64 against the variable's symbol (+ addend)

ld concatenates the records as it concatenates the blobs: in link order and,
since a record is 8 + 16 n bytes in an 8-aligned section, without padding.
So record i belongs to blob i, and ``btf_size`` checks the pairing (as the
``.BTF.objbtf`` chunk's size does).  After a final link ``address`` holds
the variable's address; after ``ld -r`` its relocation is still there.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence

from .errors import ElfError
from .relocs import Arch
from .writer import Reloc

SECTION = '.BTF.addrs'
_HEADER = 8
_ENTRY = 16


def encode_table(btf_size: int, entries: Sequence[tuple[int, int, int]], arch: Arch,
                 byteorder: str) -> tuple[bytes, list[Reloc]]:
    """The record of one object and its relocations; ``entries`` are (offset
    field's place in the blob, symbol index, addend), in blob order."""
    order = '<' if byteorder == 'little' else '>'
    out = bytearray(struct.pack(order + 'II', btf_size, len(entries)))
    relocs = []
    for field, symbol, addend in entries:
        relocs.append(Reloc(len(out) + 8, symbol, arch.abs64, addend))
        out += struct.pack(order + 'IIQ', field, 0, 0)
    return bytes(out), relocs


def address_slots(table: bytes | memoryview, byteorder: str,
                  blobs: Sequence[tuple[int, int, str]]) -> dict[int, int]:
    """Where each offset field's address sits in the concatenated ``table``:
    {field's offset in the concatenated .BTF: address's offset in ``table``}.

    ``blobs`` are (offset in the .BTF section, size, name for errors) in link
    order; record i must be blob i's.
    """
    order = '<' if byteorder == 'little' else '>'
    header = struct.Struct(order + 'II')
    field = struct.Struct(order + 'I')
    slots: dict[int, int] = {}
    pos, end = 0, len(table)
    for start, size, label in blobs:
        while pos + 4 <= end and field.unpack_from(table, pos)[0] == 0:
            pos += 4       # padding: no record starts with a zero size
        if pos + _HEADER > end:
            raise ElfError(f'{SECTION} has no record for {label}: was it encoded by '
                           'an objbtf without address tables? Rebuild it')
        btf_size, count = header.unpack_from(table, pos)
        if btf_size != size:
            raise ElfError(f'{SECTION} does not describe {label}: its record is for '
                           f'{btf_size} bytes of BTF, the blob has {size}: was it encoded by '
                           'an objbtf without address tables? Rebuild it')
        if pos + _HEADER + count * _ENTRY > end:
            raise ElfError(f'{SECTION}: the record of {label} is cut short')
        for j in range(count):
            at = pos + _HEADER + j * _ENTRY
            slots[start + field.unpack_from(table, at)[0]] = at + 8
        pos += _HEADER + count * _ENTRY
    if any(table[pos:]):
        raise ElfError(f'{SECTION} has more records than there are .BTF blobs')
    return slots
