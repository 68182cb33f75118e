"""Pass 2, relocate: where each DATASEC entry's variable landed in the output.

In a linked executable (the kernel's temporary vmlinux) ld has already
applied ``.rela.BTF``: each entry's offset field holds the low 32 bits of
the variable's address, which names the output section and the offset in
it.  In a relocatable output (``ld -r``, a module) the relocations are still
there, and are applied here against the symbols' section offsets.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable

from objbtf.btf.errors import BtfError
from objbtf.btf.types import Btf
from objbtf.elf.consts import ET_REL, SHF_ALLOC, SHN_LORESERVE
from objbtf.elf.reader import ElfFile, Section
from objbtf.elf.relocs import arch_for

from .concat import Blob, datasecs, secinfo_offsets

#: (DATASEC type id, entry index) -> (output section, offset in it)
Placements = dict[tuple[int, int], tuple[Section, int]]


def place_variables(elf: ElfFile, btf: Btf, blobs: list[Blob], btf_section: Section,
                    locate: Callable[[int, int], int]) -> Placements:
    """``locate(blob order, id in the blob)`` gives a type's id in ``btf``."""
    if elf.e_type == ET_REL:
        return _from_relocations(elf, btf, blobs, btf_section, locate)
    return _from_addresses(elf, btf)


def _from_addresses(elf: ElfFile, btf: Btf) -> Placements:
    signed = arch_for(elf).abs32_signed
    mask = (1 << (elf.elf_class)) - 1
    sections = sorted((s for s in elf.sections if s.flags & SHF_ALLOC and s.size), key=lambda s: s.addr)
    starts = [s.addr for s in sections]
    out: Placements = {}
    for ds_id, ds in datasecs(btf):
        for j, v in enumerate(ds.items):
            value = v.offset
            if signed and value >= 1 << 31:
                value = (value - (1 << 32)) & mask
            i = bisect.bisect_right(starts, value) - 1
            if i < 0 or value >= sections[i].addr + sections[i].size:
                raise BtfError(f"variable '{btf[v.type].name}' of DATASEC '{ds.name}' is at "
                               f'0x{value:x}, inside no section of the output: was .rela.BTF '
                               'applied by the link?')
            out[ds_id, j] = (sections[i], value - sections[i].addr)
    return out


def _from_relocations(elf: ElfFile, btf: Btf, blobs: list[Blob], btf_section: Section,
                      locate: Callable[[int, int], int]) -> Placements:
    rsec = elf.reloc_section_for(btf_section.index)
    symbols = elf.symbols()
    by_field: dict[int, tuple[int, int]] = {}
    if rsec is not None:
        for off, sym, _type, addend in elf.relocations(rsec):
            by_field[off] = (sym, addend)
    out: Placements = {}
    for blob in blobs:
        for (local, j), field in secinfo_offsets(blob).items():
            hit = by_field.get(blob.offset + field)
            ds_id = locate(blob.order, local)
            ds = btf[ds_id]
            if hit is None:
                raise BtfError(f"DATASEC '{ds.name}' entry {j} of {blob.label} "
                               'has no relocation in .rela.BTF')
            sym = symbols[hit[0]]
            if sym.shndx == 0 or sym.shndx >= SHN_LORESERVE:
                raise BtfError(f"variable '{btf[ds.items[j].type].name}' is relocated against "
                               f"undefined symbol '{sym.name}'")
            out[ds_id, j] = (elf.sections[sym.shndx], sym.value + hit[1])
    return out
