"""Per-architecture relocation knowledge, and applying relocations to a section in bulk.

A new architecture is one more ``Arch`` entry in ``ARCHES``; byte order comes
from the file, so big-endian variants of a machine need no entry of their own.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from .. import c_extension
from .consts import EM_386, EM_AARCH64, EM_S390, EM_X86_64, SHT_REL, SHT_RELA
from .errors import ElfError
from .reader import ElfFile, Section

#: objbtf.elf._relocs, when the compiled build runs.
_C = c_extension('objbtf.elf._relocs')


class RelocType(NamedTuple):
    """What one relocation type does to the bytes at its offset.

    kind is 'abs' (S + A), 'none' (nothing) or 'pcrel' (S + A - P, which has no
    meaning in a debug section of a relocatable object, so applying it fails).
    TLS offsets (DTPOFF and kin) are 'abs': S is the variable's offset in its
    TLS section, the best an unlinked object can say.
    """
    name: str
    width: int
    kind: str


class Arch(NamedTuple):
    """Relocation facts of one machine.

    ``abs32`` is the type that makes a 32-bit field hold a symbol's address;
    ``abs32_signed`` says whether that address is read back by sign extension
    (x86_64 kernel addresses are 0xffffffff8xxxxxxx, so R_X86_64_32S, which the
    linker checks as a signed value; R_X86_64_32 would overflow).  ``abs64``
    (None on 32-bit machines) fills a 64-bit field.

    ``wide``: the kernel's addresses need 64 bits.  A DATASEC entry's offset
    field (32 bits) then gets no relocation, and the object's address table
    (``addrtable.py``) holds each variable's address instead.  x86_64 is not
    wide: its kernel is built with -mcmodel=kernel, which promises that every
    kernel symbol fits R_X86_64_32S; no other 64-bit machine promises that
    (arm64 kernels live at 0xffff8000xxxxxxxx, which overflows
    R_AARCH64_ABS32).
    """
    name: str
    rela: bool
    abs32: int
    abs32_signed: bool
    abs64: int | None
    wide: bool
    types: dict[int, RelocType]

    def reloc_section_name(self, target: str) -> str:
        """'.rela.X' or '.rel.X' for section X, as the ABI names it."""
        return ('.rela' if self.rela else '.rel') + target

    def type_name(self, rtype: int) -> str:
        known = self.types.get(rtype)
        return known.name if known else f'{self.name} relocation type {rtype}'


def _types(*entries: tuple[int, str, int, str]) -> dict[int, RelocType]:
    return {num: RelocType(name, width, kind) for num, name, width, kind in entries}


ARCHES: dict[int, Arch] = {
    EM_X86_64: Arch('x86_64', rela=True, abs32=11, abs32_signed=True, abs64=1, wide=False,
                     types=_types(
        (0, 'R_X86_64_NONE', 0, 'none'),
        (1, 'R_X86_64_64', 8, 'abs'),
        (2, 'R_X86_64_PC32', 4, 'pcrel'),
        (10, 'R_X86_64_32', 4, 'abs'),
        (11, 'R_X86_64_32S', 4, 'abs'),
        (17, 'R_X86_64_DTPOFF64', 8, 'abs'),
        (21, 'R_X86_64_DTPOFF32', 4, 'abs'),
        (24, 'R_X86_64_PC64', 8, 'pcrel'),
    )),
    EM_386: Arch('i386', rela=False, abs32=1, abs32_signed=False, abs64=None, wide=False,
                  types=_types(
        (0, 'R_386_NONE', 0, 'none'),
        (1, 'R_386_32', 4, 'abs'),
        (2, 'R_386_PC32', 4, 'pcrel'),
        (32, 'R_386_TLS_LDO_32', 4, 'abs'),
    )),
    # R_AARCH64_ABS32 takes values in [-2**31, 2**32): no 32-bit field can hold
    # an arm64 kernel address (0xffff8000xxxxxxxx), hence wide.
    EM_AARCH64: Arch('aarch64', rela=True, abs32=258, abs32_signed=False, abs64=257,
                     wide=True, types=_types(
        (0, 'R_AARCH64_NONE', 0, 'none'),
        (256, 'R_AARCH64_NONE', 0, 'none'),
        (257, 'R_AARCH64_ABS64', 8, 'abs'),
        (258, 'R_AARCH64_ABS32', 4, 'abs'),
        (259, 'R_AARCH64_ABS16', 2, 'abs'),
        (260, 'R_AARCH64_PREL64', 8, 'pcrel'),
        (261, 'R_AARCH64_PREL32', 4, 'pcrel'),
    )),
    # s390x: big-endian, RELA.
    EM_S390: Arch('s390x', rela=True, abs32=4, abs32_signed=False, abs64=22, wide=True,
                  types=_types(
        (0, 'R_390_NONE', 0, 'none'),
        (4, 'R_390_32', 4, 'abs'),
        (5, 'R_390_PC32', 4, 'pcrel'),
        (22, 'R_390_64', 8, 'abs'),
        (23, 'R_390_PC64', 8, 'pcrel'),
        (52, 'R_390_TLS_LDO32', 4, 'abs'),
        (53, 'R_390_TLS_LDO64', 8, 'abs'),
    )),
}


def arch_for(elf: ElfFile) -> Arch:
    """The relocation facts of ``elf``'s machine, or ElfError if unknown."""
    arch = ARCHES.get(elf.machine)
    if arch is None:
        raise ElfError(f'unsupported machine {elf.machine} (e_machine); '
                       f'known: {", ".join(a.name for a in ARCHES.values())}')
    return arch


_Patch = tuple[Callable[..., None], Callable[..., tuple[int]], int, int]
_PatchTable = dict[int, _Patch | None]
_patch_tables: dict[tuple[int, str], _PatchTable] = {}


def _patch_table(elf: ElfFile, arch: Arch) -> _PatchTable:
    """type -> (pack_into, unpack_from, width, mask) for its field, or None for
    no-op types. PC-relative types are left out, so they fail like unknown ones."""
    key = (elf.machine, elf.byteorder)
    table = _patch_tables.get(key)
    if table is None:
        table = {}
        for num, rtype in arch.types.items():
            if rtype.kind == 'abs':
                st = struct.Struct(elf.layout.prefix + {2: 'H', 4: 'I', 8: 'Q'}[rtype.width])
                table[num] = (st.pack_into, st.unpack_from, rtype.width,
                              (1 << 8 * rtype.width) - 1)
            elif rtype.kind == 'none':
                table[num] = None
        _patch_tables[key] = table
    return table


def apply_relocations(elf: ElfFile, target: Section) -> bytes:
    """The data of ``target`` with its relocations applied: S + A at each offset.

    S is the symbol's st_value (in a relocatable object, the offset in its
    section, which is what DWARF consumers want); A is r_addend, or for REL
    the value already in the data. Results are truncated to the field width.
    """
    data = elf.section_data(target)
    relsec = elf.reloc_section_for(target.index)
    if relsec is None:
        return data
    if _C is not None:
        patched = _applied_in_c(elf, data, relsec)
        if patched is not None:
            return patched
    rels = elf.relocations(relsec)
    if not rels:
        return data
    symtab = elf.symtab()
    if symtab is None or relsec.link != symtab.index:
        raise ElfError(f'{relsec.name} does not use the symbol table')
    arch = arch_for(elf)
    values = [s.value for s in elf.symbols()]
    buf = bytearray(data)
    _patch(buf, rels, values, _patch_table(elf, arch), relsec.type == SHT_REL,
           arch, relsec.name)
    return bytes(buf)


def _applied_in_c(elf: ElfFile, data: bytes, relsec: Section) -> bytes | None:
    """What apply_relocations returns, from the C code (``_relocs.c``),
    or None where the Python code must decide, and say what is wrong."""
    raw, nsyms = elf.relocation_entries(relsec)
    if not raw:
        return data
    symtab = elf.symtab()
    arch = ARCHES.get(elf.machine)
    if symtab is None or relsec.link != symtab.index or arch is None:
        return None
    try:
        values = [s.value for s in elf.symbols()]
    except ElfError:
        return None
    return _C.apply(data, raw, relsec.type == SHT_RELA, elf.elf_class == 64,
                    elf.byteorder == 'big', nsyms, values, _field_widths(elf, arch))


def _field_widths(elf: ElfFile, arch: Arch) -> dict[int, int]:
    """type -> the width of the field it fills, 0 for no-op types: the
    C code's ``_patch_table``."""
    return {num: 0 if patch is None else patch[2]
            for num, patch in _patch_table(elf, arch).items()}


def _patch(buf: bytearray, rels: list[tuple[int, int, int, int]], values: list[int],
           table: _PatchTable, implicit: bool, arch: Arch, where: str) -> None:
    """The hot loop of apply_relocations; errors are only diagnosed here."""
    end = len(buf)
    for off, sym, rtype, addend in rels:
        try:
            patch = table[rtype]
        except KeyError:
            raise _unsupported(arch, rtype, off, where) from None
        if patch is None:
            continue
        pack, unpack, width, mask = patch
        if off + width > end:
            raise ElfError(f'{where}: relocation at 0x{off:x} is outside the '
                           f'{end}-byte section')
        if implicit:
            addend += unpack(buf, off)[0]
        pack(buf, off, (values[sym] + addend) & mask)


def _unsupported(arch: Arch, rtype: int, off: int, where: str) -> ElfError:
    known = arch.types.get(rtype)
    if known is not None and known.kind == 'pcrel':
        return ElfError(f'{where}: PC-relative {known.name} at 0x{off:x} is not '
                        f'supported here (debug sections use absolute relocations)')
    return ElfError(f'{where}: unsupported {arch.type_name(rtype)} at 0x{off:x}')
