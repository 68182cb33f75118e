"""Pass 3, relocate: where each DATASEC entry's variable landed in the output.

In a linked executable (the kernel's temporary vmlinux) ld has already
applied ``.rela.BTF``: each entry's offset field holds the low 32 bits of
the variable's address, which names the output section and the offset in
it.  In a relocatable output (``ld -r``, a module) the relocations are still
there, and are applied here against the symbols' section offsets.  Where
the objects carry an address table (``.BTF.addrs``, machines whose kernel
addresses need 64 bits: ``objbtf/elf/addrtable.py``), each entry's address
is read from there instead, the same two ways.

Entries are found by where their offset field sits in the input section,
so the link cache (``cache.py``) can place the variables of a link it
replays without reading any type.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable

from objbtf.btf.errors import BtfError
from objbtf.btf.kinds import KINDS, Kind
from objbtf.btf.types import Btf
from objbtf.elf.addrtable import SECTION as ADDR_TABLE, address_slots
from objbtf.elf.consts import ET_REL, SHF_ALLOC, SHN_LORESERVE
from objbtf.elf.reader import ElfFile, Section
from objbtf.elf.relocs import arch_for
from objbtf.errors import shown

from .concat import Blob, datasecs

#: (DATASEC type id, entry index) -> (output section, offset in it)
Placements = dict[tuple[int, int], tuple[Section, int]]
#: Where an entry's offset field sits: (the blob's place in the merge
#: order, byte offset in the blob).
Field = tuple[int, int]
#: (DATASEC type id, entry index) -> its offset field
Fields = dict[tuple[int, int], Field]
Origin = Callable[[int], tuple[Blob, int]]


def entry_fields(btf: Btf, origin: Origin) -> Fields:
    """Where each DATASEC entry's offset field sits; ``origin(type id)``
    gives the type's blob and its record's offset in it."""
    out: Fields = {}
    layout = KINDS[Kind.DATASEC]
    for ds_id, ds in datasecs(btf):
        blob, record = origin(ds_id)
        for j in range(len(ds.items)):
            out[ds_id, j] = (blob.order, record + layout.entry_offset(j, 'offset'))
    return out


def section_offsets(fields: list[Field], blobs: list[Blob]) -> list[int]:
    """The fields' offsets in the input section; ``blobs`` in merge order."""
    return [blobs[order].offset + off for order, off in fields]


def place_fields(elf: ElfFile, btf_section: Section, blobs: list[Blob], fields: list[int],
                 describe: Callable[[int], str]) -> list[tuple[Section, int]]:
    """(output section, offset in it) of the variable of each entry whose
    offset field sits at ``fields[k]`` of ``btf_section``, which holds
    ``blobs``; ``describe(k)`` names it in errors."""
    table = elf.section_by_name(ADDR_TABLE)
    if table is None:
        where, width, slots = btf_section, 4, fields
    else:
        where, width, slots = table, 8, _table_slots(elf, table, blobs, fields, describe)
    if elf.e_type == ET_REL:
        return _from_relocations(elf, where, width, slots, describe)
    return _from_addresses(elf, where, width, slots, describe)


def _table_slots(elf: ElfFile, table: Section, blobs: list[Blob], fields: list[int],
                 describe: Callable[[int], str]) -> list[int]:
    """Where the address of each field's variable sits in the address table."""
    in_link_order = sorted(blobs, key=lambda b: b.index)
    slots = address_slots(elf.section_view(table), elf.byteorder,
                          [(b.offset, len(b.data), b.label) for b in in_link_order])
    out = []
    for k, field in enumerate(fields):
        slot = slots.get(field)
        if slot is None:
            raise BtfError(f'{describe(k)} has no entry in {ADDR_TABLE}')
        out.append(slot)
    return out


def place_variables(elf: ElfFile, btf: Btf, btf_section: Section, fields: Fields,
                    blobs: list[Blob]) -> Placements:
    """Every DATASEC entry of ``btf``, placed in the output."""
    keys = list(fields)

    def describe(k: int) -> str:
        ds_id, j = keys[k]
        ds = btf[ds_id]
        return (f"variable '{btf[ds.items[j].type].name}' of DATASEC '{ds.name}' in "
                f'{blobs[fields[ds_id, j][0]].label}')
    offsets = section_offsets(list(fields.values()), blobs)
    return dict(zip(keys, place_fields(elf, btf_section, blobs, offsets, describe)))


def _from_addresses(elf: ElfFile, where: Section, width: int, fields: list[int],
                    describe: Callable[[int], str]) -> list[tuple[Section, int]]:
    """From the addresses ld wrote into the ``width``-byte fields of ``where``."""
    signed = width == 4 and arch_for(elf).abs32_signed
    mask = (1 << (elf.elf_class)) - 1
    sections = sorted((s for s in elf.sections if s.flags & SHF_ALLOC and s.size), key=lambda s: s.addr)
    starts = [s.addr for s in sections]
    data = elf.section_view(where)
    byteorder = elf.byteorder
    out = []
    for k, field in enumerate(fields):
        value = int.from_bytes(data[field:field + width], byteorder)
        if signed and value >= 1 << 31:
            value = (value - (1 << 32)) & mask
        i = bisect.bisect_right(starts, value) - 1
        if i < 0 or value >= sections[i].addr + sections[i].size:
            raise BtfError(f'{describe(k)} is at 0x{value:x}, inside no section of the '
                           f'output: was .rela{where.name} applied by the link?')
        out.append((sections[i], value - sections[i].addr))
    return out


def _from_relocations(elf: ElfFile, where: Section, width: int, fields: list[int],
                      describe: Callable[[int], str]) -> list[tuple[Section, int]]:
    """From the relocations of the ``width``-byte fields of ``where`` that
    ``ld -r`` left (on a REL target, with the addends the fields hold: a
    variable without a symbol of its own is placed by its section's)."""
    by_field = elf.relocations_by_field(where, width)
    symbols = elf.symbols()
    out = []
    for k, field in enumerate(fields):
        hit = by_field.get(field)
        if hit is None:
            raise BtfError(f'{describe(k)} has no relocation in .rela{where.name}')
        sym = symbols[hit[0]]
        if sym.shndx == 0 or sym.shndx >= SHN_LORESERVE:
            raise BtfError(f"{describe(k)} is relocated against undefined symbol "
                           f"'{shown(sym.name)}'")
        if sym.shndx >= len(elf.sections):
            raise BtfError(f"{describe(k)} is relocated against symbol '{shown(sym.name)}' "
                           f'of section {sym.shndx}, which the file does not have')
        out.append((elf.sections[sym.shndx], sym.value + hit[1]))
    return out
