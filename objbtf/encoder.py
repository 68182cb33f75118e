"""The per-object step: DWARF of one object -> its .BTF and .rel(a).BTF sections.

Runs once per compiled object, so it imports nothing heavy (no lief, no
pyelftools) and applies DWARF relocations in bulk.
"""
from __future__ import annotations

from collections import namedtuple

from .btf.dedup import dedup
from .btf.hashing import type_hashes
from .btf.sidecar import SECTION as SIDECAR, encode_sidecar, typeless_sidecar
from .btf.kinds import Kind
from .btf.types import Btf, BtfType, VarSecinfo
from .btf.writer import encode_btf
from .dwarf import constants as C
from .dwarf.loader import CuLoader
from .dwarf.reader import DebugSections, Die, Expr, read_uleb, read_units
from .elf.consts import SHN_LORESERVE, SHT_REL
from .elf.reader import ElfFile, Symbol
from .elf.relocs import apply_relocations, arch_for
from .elf.writer import NewSection, Reloc, rewrite_object
from .features import Features

BTF_SECTION = '.BTF'
STT_OBJECT, STT_FUNC, STT_SECTION = 1, 2, 3
PERCPU_SECTION = '.data..percpu'
#: Variable names pahole never encodes: compiler and macro helpers.
SKIPPED_VAR_PREFIXES = ('__UNIQUE_ID', '__tpstrtab_', '__exitcall_')


class EncodeError(Exception):
    """An object that cannot be encoded; the message says why."""


class VarPlacement(namedtuple('VarPlacement', 'section offset symbol addend size')):
    """Where a variable lives in this object, from its DWARF address's relocation."""
    __slots__ = ()


class Encoded(namedtuple('Encoded', 'btf raw sidecar relocs functions variables')):
    """The result of encoding one object."""
    __slots__ = ()


def has_dwarf(elf: ElfFile) -> bool:
    sec = elf.section_by_name('.debug_info')
    return sec is not None and sec.size > 0


def encode_elf(elf: ElfFile, features: Features, name: str) -> Encoded:
    """Encode the BTF of an object that has DWARF (see ``has_dwarf``);
    ``name`` is the object's path as the build gave it, for the link."""
    secs = _debug_sections(elf)
    units = read_units(secs)
    all_dies: dict[int, Die] = {}
    for cu in units:
        all_dies.update(cu.by_offset)
    symbols = elf.symbols()
    btf = Btf(byteorder=elf.byteorder)
    places = _Placer(elf, symbols)
    func_names = {s.name for s in symbols if s.type == STT_FUNC}
    generated: set[str] = set()
    entries: dict[int, list[tuple[VarPlacement, int]]] = {}
    n_funcs = n_vars = 0
    for cu in units:
        loader = CuLoader(cu, btf, features, all_dies)
        loader.load_types()
        loader.add_type_decl_tags()
        n_funcs += _add_functions(loader, cu.dies, func_names, generated)
        if features.var:
            n_vars += _add_variables(loader, cu, places, features, entries)
    placements = _add_datasecs(btf, elf, entries)
    out = dedup(btf)
    offsets: list[int] = []
    raw = encode_btf(out, offsets)
    hashes, flags = type_hashes(out)
    sidecar = encode_sidecar(name, hashes, offsets, flags, len(raw), elf.byteorder)
    return Encoded(out, raw, sidecar, _datasec_relocs(out, placements, offsets, elf),
                   n_funcs, n_vars)


def _debug_sections(elf: ElfFile) -> DebugSections:
    def data(name: str, relocate: bool = False) -> bytes:
        sec = elf.section_by_name(name)
        if sec is None:
            return b''
        return apply_relocations(elf, sec) if relocate else elf.section_data(sec)

    abbrev = data('.debug_abbrev')
    if not abbrev:
        raise EncodeError('.debug_info without .debug_abbrev')
    return DebugSections(info=data('.debug_info', True), abbrev=abbrev,
                         str=data('.debug_str'), line_str=data('.debug_line_str'),
                         str_offsets=data('.debug_str_offsets', True),
                         addr=data('.debug_addr', True), byteorder=elf.byteorder)


def _add_functions(loader: CuLoader, dies: list[Die], func_names: set[str],
                   generated: set[str]) -> int:
    """pahole's choice: a definition, every parameter named, an ELF function
    symbol of that exact name (or external when the object has none), and
    only the first DIE of each name."""
    count = 0
    for die in dies:
        if not die.top or die.tag != C.TAG_subprogram or die.attrs.get(C.AT_declaration):
            continue
        name = loader.origin_attr(die, C.AT_name)
        if not name:
            continue
        params = loader.params(die)
        if any(not n for n, t in params if t):
            continue
        if func_names:
            if name not in func_names or name in generated:
                continue
            generated.add(name)
        elif not loader.origin_attr(die, C.AT_external):
            continue
        loader.add_function(die, name)
        count += 1
    return count


class _Placer:
    """Finds, through the DWARF relocations, which symbol a variable's address is."""

    def __init__(self, elf: ElfFile, symbols: list[Symbol]):
        self.elf = elf
        self.symbols = symbols
        self._relocs: dict[str, dict[int, tuple[int, int]]] = {}
        self._by_place: dict[tuple[int, int], list[Symbol]] | None = None

    def _reloc_map(self, section: str) -> dict[int, tuple[int, int]]:
        m = self._relocs.get(section)
        if m is None:
            m = {}
            sec = self.elf.section_by_name(section)
            rsec = self.elf.reloc_section_for(sec.index) if sec is not None else None
            if rsec is not None:
                implicit = self.elf.section_data(sec) if rsec.type == SHT_REL else None
                width = 4 if self.elf.elf_class == 32 else 8
                for off, sym, _type, addend in self.elf.relocations(rsec):
                    if implicit is not None:
                        addend = int.from_bytes(implicit[off:off + width], self.elf.byteorder)
                    m[off] = (sym, addend)
            self._relocs[section] = m
        return m

    def place(self, cu, location: Expr, name: str, type_size: int) -> VarPlacement | None:
        """The placement of a variable whose DW_AT_location is ``location``."""
        expr = location.data
        if not expr:
            return None
        if expr[0] == C.OP_addr and len(expr) == 1 + cu.address_size:
            hit = self._reloc_map('.debug_info').get(location.pos + 1)
        elif expr[0] in (C.OP_addrx, C.OP_GNU_addr_index):
            index = read_uleb(expr, 1)[0]
            hit = self._reloc_map('.debug_addr').get(cu.addr_base + index * cu.address_size)
        else:
            return None
        if hit is None:
            return None
        sym_index, addend = hit
        if sym_index >= len(self.symbols):
            raise EncodeError(f'DWARF relocation refers to symbol {sym_index}, '
                              f'the symbol table has {len(self.symbols)}')
        sym = self.symbols[sym_index]
        if sym.shndx == 0 or sym.shndx >= SHN_LORESERVE:
            return None
        offset = sym.value + addend
        own = self._own_symbol(sym.shndx, offset, name)
        if own is not None:
            return VarPlacement(sym.shndx, offset, own.index, 0, own.size or type_size)
        return VarPlacement(sym.shndx, offset, sym_index, addend, type_size)

    def _own_symbol(self, shndx: int, offset: int, name: str) -> Symbol | None:
        """The variable's own data symbol, when the object has one."""
        if self._by_place is None:
            self._by_place = {}
            for s in self.symbols:
                if s.type in (STT_OBJECT, 0) and s.name:
                    self._by_place.setdefault((s.shndx, s.value), []).append(s)
        for s in self._by_place.get((shndx, offset), ()):
            if s.name == name:
                return s
        return None


def _add_variables(loader: CuLoader, cu, places: _Placer, features: Features,
                   entries: dict[int, list[tuple[VarPlacement, int]]]) -> int:
    """VARs for the unit's top-level variable definitions: percpu ones, or
    all of them with ``global_var``."""
    count = 0
    sections = places.elf.sections
    for die in cu.dies:
        if not die.top or die.tag != C.TAG_variable:
            continue
        location = die.attrs.get(C.AT_location)
        if not isinstance(location, Expr):
            continue
        name = loader.origin_attr(die, C.AT_name)
        if not name or name.startswith(SKIPPED_VAR_PREFIXES):
            continue
        size = loader.type_size(loader.origin_attr(die, C.AT_type))
        if size == 0:
            continue
        placement = places.place(cu, location, name, size)
        if placement is None:
            continue
        secname = sections[placement.section].name
        if not features.global_var and not _is_percpu(secname):
            continue
        var_id = loader.add_variable(die, name)
        entries.setdefault(placement.section, []).append((placement, var_id))
        count += 1
    return count


def _is_percpu(name: str) -> bool:
    return name == PERCPU_SECTION or name.startswith(PERCPU_SECTION + '..')


def _add_datasecs(btf: Btf, elf: ElfFile,
                  entries: dict[int, list[tuple[VarPlacement, int]]]) -> list[list[VarPlacement]]:
    """One DATASEC per input section, named after it, entries by offset.

    Returns the placements in DATASEC and entry order, for the relocations.
    """
    placements = []
    for shndx in sorted(entries, key=lambda i: (elf.sections[i].name, i)):
        sec = elf.sections[shndx]
        rows = sorted(entries[shndx], key=lambda pv: (pv[0].offset, pv[1]))
        btf.add(BtfType(Kind.DATASEC, sec.name, size=sec.size,
                        items=tuple(VarSecinfo(v, p.offset, p.size) for p, v in rows)))
        placements.append([p for p, _ in rows])
    return placements


def _datasec_relocs(btf: Btf, placements: list[list[VarPlacement]], offsets: list[int],
                    elf: ElfFile) -> list[Reloc]:
    """A relocation on the offset field of every DATASEC entry.

    Dedup keeps DATASECs and their entries in order, so the n-th DATASEC of
    the output is the n-th one added.
    """
    arch = arch_for(elf)
    relocs = []
    datasecs = [(i, t) for i, (_, t) in enumerate(btf.own()) if t.kind is Kind.DATASEC]
    for (pos, t), rows in zip(datasecs, placements, strict=True):
        base = 24 + offsets[pos] + 12
        for j, p in enumerate(rows):
            relocs.append(Reloc(base + 12 * j + 4, p.symbol, arch.abs32, p.addend))
    return relocs


def write_sections(path: str, elf: ElfFile, enc: Encoded) -> None:
    """Put .BTF, its relocations and .BTF.objbtf into the object at ``path``,
    atomically."""
    rewrite_object(path, elf, [NewSection(BTF_SECTION, enc.raw, addralign=4),
                               NewSection(SIDECAR, enc.sidecar, addralign=8)],
                   {BTF_SECTION: enc.relocs})


def write_typeless_chunk(path: str, elf: ElfFile, name: str) -> None:
    """Mark an object without types as seen by objbtf: a ``.BTF.objbtf``
    chunk with its name and no types, and no .BTF (the kernel rejects BTF
    without types).  The link then knows the object lacks nothing."""
    rewrite_object(path, elf, [NewSection(SIDECAR, typeless_sidecar(name, elf.byteorder),
                                          addralign=8)])
