"""The per-object step: DWARF of one object -> its .BTF and .rel(a).BTF sections
(or, where kernel addresses need 64 bits, .BTF.addrs and its relocations).

Runs once per compiled object, so it imports nothing heavy (no lief, no
pyelftools) and applies DWARF relocations in bulk.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

from ..btf.dedup import dedup, dedup_blob
from ..btf.hashing import blob_hashes
from ..btf.chunk import (FROM_COMPILER_BTF, FROM_DWARF, SECTION as CHUNK_SECTION, encode_chunk,
                         typeless_chunk)
from ..btf.kinds import BTF_HEADER_LEN, KINDS, Kind
from ..btf.reader import parse_btf
from ..btf.validate import Problem, first_problem, first_problem_of_blob
from ..btf.types import Btf, BtfType, VarSecinfo
from ..btf.writer import encode_btf
from ..dwarf import constants as C
from ..dwarf.loader import CuLoader
from ..dwarf.locations import (
    NR_REGISTER_PARAMS, REGISTER_PARAMS, Locations, location_register, parameter_register,
)
from ..dwarf.reader import DebugSections, Die, Expr, die_map, read_uleb, read_units
from ..elf.consts import SHN_LORESERVE
from ..elf.addrtable import SECTION as ADDR_TABLE, encode_table
from ..elf.reader import ElfFile, Symbol
from ..elf.relocs import apply_relocations, arch_for
from ..elf.writer import NewSection, Reloc, rewrite_object
from ..errors import ObjbtfError, shown
from ..features import Features
from ..btf.function_rules import (
    FACT_INCONSISTENT, FACT_OPTIMIZED_CLONE, FACT_REORDERED, FACT_UNCERTAIN_LOC,
    FACT_UNEXPECTED_REG, FACT_WEAK, STT_FUNC, function_key, function_keys, is_optimized_clone,
    prototype,
)

BTF_SECTION = '.BTF'
STT_OBJECT, STT_SECTION, STT_FILE = 1, 3, 4
PERCPU_SECTION = '.data..percpu'
#: Variable names pahole never encodes: compiler and macro helpers.
SKIPPED_VAR_PREFIXES = ('__UNIQUE_ID', '__tpstrtab_', '__exitcall_')
#: The name objtool's --prefix gives the padding before a function.
OBJTOOL_PREFIX: Final = '__pfx_'
#: Each source of types (chunk.FROM_*), as messages name it.
SOURCE_NAMES: Final = {FROM_DWARF: 'its DWARF', FROM_COMPILER_BTF: "its compiler's BTF"}


class EncodeError(ObjbtfError):
    """An object that cannot be encoded; the message says why."""


class VarPlacement(NamedTuple):
    """Where a variable lives in this object, from its DWARF address's relocation."""
    section: int
    offset: int
    symbol: int
    addend: int
    size: int


class Loaded(NamedTuple):
    """An object's types as a loader made them (its DWARF, its compiler's
    BTF), before ``finish_encoding``: each chosen variable's placement by
    section, counts, the functions' facts for the link
    (``objbtf.btf.function_rules``), and what the source shows it lost
    ((chunk.LOST_*, type name): a compiler's BTF only)."""
    btf: Btf
    entries: dict[int, list[tuple[VarPlacement, int]]]
    functions: int
    variables: int
    facts: dict[str, int]
    losses: list[tuple[int, str]]


class Encoded(NamedTuple):
    """The result of encoding one object: ``raw`` its BTF, of ``types``
    types; ``relocs`` maps a section's name to its relocations; ``addrs``
    is the address table, or None; ``facts`` what the link needs to know of
    its functions (``functions.py``)."""
    types: int
    raw: bytes
    chunk: bytes
    relocs: dict[str, list[Reloc]]
    addrs: bytes | None
    functions: int
    variables: int
    facts: dict[str, int]

    @property
    def btf(self) -> Btf:
        """The types, read from ``raw`` (the encoder makes no model of
        them in the compiled build)."""
        return parse_btf(self.raw)


def has_dwarf(elf: ElfFile) -> bool:
    sec = elf.debug_section('.debug_info')
    return sec is not None and sec.size > 0


def encode_elf(elf: ElfFile, features: Features, name: str) -> Encoded:
    """Encode the BTF of an object that has DWARF (see ``has_dwarf``);
    ``name`` is the object's path as the build gave it, for the link."""
    loaded = load_dwarf(elf, features)
    return finish_encoding(loaded.btf, elf, loaded.entries, name, loaded.functions,
                           loaded.variables, loaded.facts)


def encode_assembly(elf: ElfFile, features: Features, name: str) -> Encoded | None:
    """Encode an assembly object without DWARF (``is_bare_assembly``) as
    gas's DWARF would have it encoded; None if it defines no function.
    ``features`` change nothing of FUNCs."""
    loaded = load_assembly(elf)
    if not loaded.functions:
        return None
    return finish_encoding(loaded.btf, elf, loaded.entries, name, loaded.functions,
                           loaded.variables, loaded.facts)


def load_dwarf(elf: ElfFile, features: Features) -> Loaded:
    """The types of an object that has DWARF, loaded from it."""
    secs = debug_sections(elf)
    units = read_units(secs)
    dies = die_map(units)
    symbols = elf.symbols()
    btf = Btf(byteorder=elf.byteorder)
    places = _Placer(elf, symbols)
    functions = _Functions(elf, symbols, secs.loclists)
    entries: dict[int, list[tuple[VarPlacement, int]]] = {}
    n_vars = 0
    for cu in units:
        loader = CuLoader(cu, btf, features, dies)
        loader.load_types()
        loader.add_type_decl_tags()
        functions.add(loader, cu)
        if features.var:
            n_vars += _add_variables(loader, cu, places, features, entries)
    return Loaded(btf, entries, len(functions.first), n_vars, functions.facts, [])


def is_bare_assembly(elf: ElfFile) -> bool:
    """Whether the object is what gas makes of an assembly file without
    ``-g``: no DWARF, no symbol of type FILE and no ``.comment``.  A
    compiler, GCC or clang, names its source in a FILE symbol and itself in
    ``.comment``, with or without debug information, and ``strip
    --strip-debug`` takes the FILE symbols but leaves ``.comment``; gas
    makes neither but for a ``.file`` or ``.ident`` directive, which cpp's
    line markers are not.  The DWARF-less Kbuild assembles so
    (docs/dwarfless.md)."""
    return not has_dwarf(elf) and elf.section_by_name('.comment') is None \
        and not elf.typed_symbols(STT_FILE)


def load_assembly(elf: ElfFile) -> Loaded:
    """The FUNCs an assembly object's DWARF would give, from its symbols.

    With ``-g``, gas's DWARF has a DW_TAG_subprogram for every function
    symbol the file defines with a size, without parameters or a return
    type (DWARF 5 names an unspecified type), and the DWARF path gives each
    whose name is a key of the object's function symbols a FUNC ``void
    (void)``, the weak ones FACT_WEAK; the link's rules then apply as to
    any FUNC (a weak C definition of the same name has another prototype:
    both dropped).  An object without DWARF gets the same from its symbol
    table, in its order, so that the DWARF-less build, which gives assembly
    no ``-g``, links the FUNCs the DWARF build does.

    But for the symbols objtool adds after gas (``--prefix``, the kernel's
    CONFIG_CALL_PADDING): ``__pfx_NAME``, a function symbol over the
    padding that ends where function NAME starts, which no DWARF names."""
    symbols = elf.symbols()
    keys, weak = function_keys(symbols)
    btf = Btf(byteorder=elf.byteorder)
    facts: dict[str, int] = {}
    defined = [s for s in symbols
               if s.type == STT_FUNC and 0 < s.shndx < SHN_LORESERVE and s.size]
    starts = {(s.shndx, s.value, s.name) for s in defined}
    proto = 0
    for s in defined:
        if s.name not in keys or s.name in facts or s.name.startswith(OBJTOOL_PREFIX) \
                and (s.shndx, s.value + s.size, s.name[len(OBJTOOL_PREFIX):]) in starts:
            continue
        if not proto:
            proto = btf.add(BtfType(Kind.FUNC_PROTO))
        btf.add(BtfType(Kind.FUNC, s.name, type=proto))
        facts[s.name] = FACT_WEAK if s.name in weak else 0
    return Loaded(btf, {}, len(facts), 0, {n: f for n, f in facts.items() if f}, [])


def finish_encoding(btf: Btf, elf: ElfFile, entries: dict[int, list[tuple[VarPlacement, int]]],
                    name: str, n_funcs: int, n_vars: int, facts: dict[str, int],
                    from_source: int = FROM_DWARF,
                    losses: Sequence[tuple[int, str]] = ()) -> Encoded:
    """What every loader's types go through: a DATASEC per input section
    from ``entries`` (section index -> each variable's placement and VAR
    id), the object's dedup, the check that the kernel would accept it,
    the blob, its relocations and the chunk, with ``facts`` on the
    functions, where the types came from (``from_source``, chunk.FROM_*)
    and the ``losses`` that source shows."""
    source = SOURCE_NAMES[from_source]
    placements = _add_datasecs(btf, elf, entries)
    offsets: list[int] = []
    try:
        out, raw, datasecs = _deduplicated(btf, offsets, source, elf.pointer_size)
        hashes, flags = blob_hashes(out, raw)
        chunk = encode_chunk(name, hashes, offsets, flags, raw, elf.byteorder, facts,
                             from_source, losses)
    except UnicodeEncodeError as err:
        # Names are read as UTF-8, other bytes kept as surrogates: one
        # from a damaged string table (a section's, in clang's shared one)
        # cannot be written as BTF text.
        raise EncodeError(f"{source} has a name that is not UTF-8: '{shown(err.object)}'") \
            from None
    relocs, addrs = _datasec_relocs(datasecs, placements, offsets, elf, len(raw))
    return Encoded(len(offsets), raw, chunk, relocs, addrs, n_funcs, n_vars, facts)


def _section(elf: ElfFile, name: str, relocate: bool = False) -> bytes:
    sec = elf.debug_section(name)
    if sec is None:
        return b''
    return apply_relocations(elf, sec) if relocate else elf.section_data(sec)


def _deduplicated(btf: Btf, offsets: list[int], source: str,
                  ptr_size: int) -> tuple[Btf | None, bytes, list[int]]:
    """The blob of ``btf`` deduplicated (each type's offset into
    ``offsets``), checked as ``_checked_blob`` checks it, the positions
    of its DATASECs among its types, and its model.  The compiled build
    makes the blob in C (``dedup.dedup_blob``) and no model (None): the
    passes after read the blob, and parse it only where their C code
    gives up."""
    made = dedup_blob(btf)
    if made is None:
        out = dedup(btf, consume=True)
        raw = _checked_blob(out, offsets, source, ptr_size)
        return out, raw, [i for i, h in enumerate(out.heads()) if h[0] is Kind.DATASEC]
    raw, starts, datasecs = made
    offsets += starts
    _refuse_invalid(first_problem_of_blob(None, raw, ptr_size), source)
    return None, raw, datasecs


def _checked_blob(btf: Btf, offsets: list[int], source: str, ptr_size: int) -> bytes:
    """The blob of ``btf`` (each type's offset into ``offsets``), made from
    ``source`` for a target of ``ptr_size``-byte pointers; EncodeError if
    it breaks a rule of the kernel's (``objbtf check``).

    A compiler's DWARF always gives valid BTF (tests/test_kernel_objects.py
    checks every object of the reference kernel); corrupt DWARF (a name
    from a damaged .debug_str, a member past its struct, a typedef loop)
    would not, and a kernel that finds such BTF at boot has no BTF at all.
    So nothing is written that the kernel would refuse.  The blob is
    checked (in C where it can be) rather than the model before it; a
    model the writer cannot write is checked first, whose rules say why."""
    try:
        raw = encode_btf(btf, offsets)
    except Exception:
        _refuse_invalid(first_problem(btf, ptr_size=ptr_size), source)
        raise
    _refuse_invalid(first_problem_of_blob(btf, raw, ptr_size), source)
    return raw


def _refuse_invalid(problem: Problem | None, source: str) -> None:
    """EncodeError for ``problem`` in the BTF made from ``source``, if any."""
    if problem is not None:
        raise EncodeError(f'{source} gives BTF the kernel would reject: {problem}')


def debug_sections(elf: ElfFile) -> DebugSections:
    """The DWARF sections the encoder decodes, relocated where their values need it."""
    def data(name: str, relocate: bool = False) -> bytes:
        return _section(elf, name, relocate)

    abbrev = data('.debug_abbrev')
    if not abbrev:
        raise EncodeError('.debug_info without .debug_abbrev')
    return DebugSections(info=data('.debug_info', True), abbrev=abbrev,
                         str=data('.debug_str'), line_str=data('.debug_line_str'),
                         str_offsets=data('.debug_str_offsets', True),
                         addr=data('.debug_addr', True), byteorder=elf.byteorder,
                         loclists=data('.debug_loclists'))


#: s390x passes no struct in two registers (dwarf_loader.c's arch__agg_use_two_regs).
_ONE_REGISTER_AGGREGATES = frozenset({22})


class _Functions:
    """pahole 1.31's choice of functions in one object, and the facts the
    link needs about them (``objbtf/btf/function_rules.py``).

    A FUNC for the first definition (in DIE order, as pahole takes the
    first) of each name that is the key of a function symbol of the object
    (or that is external, when the object has no function symbols), whose
    parameters all have names.  Every such definition adds its facts: its
    parameters' registers and order, whether its prototype is the first
    one's, and, for the definition whose code is a ``.constprop`` or
    ``.isra`` clone's (its DW_AT_low_pc is the clone symbol's value), whether
    a parameter was optimized out.
    """

    def __init__(self, elf: ElfFile, symbols: list[Symbol], loclists: bytes):
        self.keys, self.weak = function_keys(symbols)
        #: key -> where its optimized clones start, in their sections
        self.clones: dict[str, set[int]] = {}
        for sym in symbols:
            if sym.type == STT_FUNC and sym.shndx and is_optimized_clone(sym.name):
                key = function_key(sym.name)
                if key is not None:
                    self.clones.setdefault(key, set()).add(sym.value)
        self.registers = REGISTER_PARAMS.get(elf.machine, ())
        self.nr_registers = NR_REGISTER_PARAMS.get(elf.machine, 0)
        self.two_register_aggregates = elf.machine not in _ONE_REGISTER_AGGREGATES
        self.locations = Locations(loclists, lambda: _section(elf, '.debug_loc', True),
                                   elf.byteorder)
        self.first: dict[str, tuple[str, ...]] = {}       # name -> its FUNC's prototype
        self.facts: dict[str, int] = {}

    def add(self, loader: CuLoader, cu) -> None:
        """The FUNCs and facts of one unit's top-level functions."""
        for die in cu.dies:
            if not die.top or die.tag != C.TAG_subprogram or die.attrs.get(C.AT_declaration):
                continue
            name = loader.origin_attr(die, C.AT_name)
            if not name:
                continue
            params = loader.params(die)
            if any(not n for n, t in params if t):
                continue
            if self.keys:
                if name not in self.keys:
                    continue
            elif not loader.origin_attr(die, C.AT_external):
                continue
            shape = prototype(loader.btf, loader.proto(die))
            facts = self._parameter_facts(loader, cu, die)
            clones = self.clones.get(name)
            if clones is not None and die.attrs.get(C.AT_low_pc) in clones \
                    and self._optimized_out(loader, cu, die):
                facts |= FACT_OPTIMIZED_CLONE
            first = self.first.get(name)
            if first is None:
                self.first[name] = shape
                loader.add_function(die, name)
                facts |= FACT_WEAK if name in self.weak else 0
            elif first != shape:
                facts |= FACT_INCONSISTENT
            self.facts[name] = self.facts.get(name, 0) | facts

    def _parameter_facts(self, loader: CuLoader, cu, die: Die) -> int:
        """pahole's unexpected_reg, uncertain_parm_loc and reordered_parm for
        one definition."""
        regs = self.registers
        unexpected = has_struct = uncertain = reordered = False
        params = [c for c in die.children if c.tag == C.TAG_formal_parameter]
        origin = loader.dies.get(die.attrs.get(C.AT_abstract_origin) or 0)
        if origin is not None:
            origin_index = {c.offset: i for i, c in enumerate(
                [c for c in origin.children if c.tag == C.TAG_formal_parameter])}
            reordered = any(origin_index.get(c.attrs.get(C.AT_abstract_origin) or 0, i) != i
                            for i, c in enumerate(params) if C.AT_type not in c.attrs)
        for idx, c in enumerate(params):
            type_off = loader.origin_attr(c, C.AT_type)
            if _is_struct(loader, type_off):
                has_struct = True
            if idx < len(regs):
                loc = c.attrs.get(C.AT_location)
                if loc is None:
                    continue
                exprs = self.locations.expressions(loc, cu.version, cu.address_size)
                try:
                    actual = parameter_register(exprs, regs[idx])
                except (IndexError, struct.error):
                    raise EncodeError(f'the location of a parameter of the function at '
                                      f'0x{die.offset:x} of .debug_info is truncated') from None
                if 0 <= actual != regs[idx]:
                    unexpected = True
            elif self.nr_registers and len(params) >= self.nr_registers:
                uncertain = uncertain or _is_packed_struct(loader, type_off, cu.address_size)
        return ((FACT_UNEXPECTED_REG if unexpected and not has_struct else 0)
                | (FACT_UNCERTAIN_LOC if uncertain else 0) | (FACT_REORDERED if reordered else 0))

    def _optimized_out(self, loader: CuLoader, cu, die: Die) -> bool:
        """Whether a parameter of a GCC definition was optimized out, as the
        newest pahole decides it (optimized_parms, from dwarf_loader.c's
        function__analyze_parameter_locations without true signatures): it
        has no location, or a constant value instead, or it should arrive
        in a register and its location names none.  A parameter wider than
        a register (a struct, __int128) takes two register places when it
        fits in two, but on s390x, and is described in pieces."""
        place = 0
        word = cu.address_size
        for c in die.children:
            if c.tag != C.TAG_formal_parameter:
                continue
            loc = c.attrs.get(C.AT_location)
            if loc is None:
                return True
            size = loader.type_size(loader.origin_attr(c, C.AT_type))
            aggregate = self.two_register_aggregates and size > word
            if place < self.nr_registers:
                exprs = self.locations.expressions(loc, cu.version, cu.address_size)
                try:
                    if location_register(exprs, aggregate) < 0:
                        return True
                except (IndexError, struct.error):
                    raise EncodeError(f'the location of a parameter of the function at '
                                      f'0x{die.offset:x} of .debug_info is truncated') from None
            place += 2 if aggregate and size <= 2 * word else 1
        return False


def _is_struct(loader: CuLoader, type_off: int | None) -> bool:
    """A struct, through const and typedefs (pahole's param__is_struct)."""
    for _ in range(16):
        die = loader.dies.get(type_off) if type_off else None
        if die is None:
            return False
        if die.tag == C.TAG_structure_type:
            return True
        if die.tag not in (C.TAG_const_type, C.TAG_typedef):
            return False
        type_off = die.attrs.get(C.AT_type)
    return False


def _is_packed_struct(loader: CuLoader, type_off: int | None, pointer_size: int) -> bool:
    """A named struct (the parameter's own type, as pahole looks) whose
    layout says packed (``is_packed_struct``)."""
    die = loader.dies.get(type_off) if type_off else None
    if die is None or die.tag != C.TAG_structure_type or not die.attrs.get(C.AT_name):
        return False
    return is_packed_struct(loader.btf, loader.ref(type_off), pointer_size)


def uncertain_location(btf: Btf, proto: BtfType, machine: int, pointer_size: int) -> bool:
    """pahole's uncertain_parm_loc for a function of prototype ``proto``
    (FUNC_PROTO of ``btf``), as ``_Functions`` decides it from the
    parameters of its DWARF definition: with at least as many parameters as
    the machine passes in registers, one past them (on the stack) whose own
    type is a named struct laid out packed.  The types alone decide, so the
    loader of a compiler's BTF applies it too."""
    nr_registers = NR_REGISTER_PARAMS.get(machine, 0)
    params = [p for p in proto.items if p.type]       # (not varargs' trailing 0)
    if not nr_registers or len(params) < nr_registers:
        return False
    return any(_named_struct(btf, p.type) and is_packed_struct(btf, p.type, pointer_size)
               for p in params[len(REGISTER_PARAMS.get(machine, ())):])


def _named_struct(btf: Btf, type_id: int) -> bool:
    t = btf[type_id]
    return t.kind is Kind.STRUCT and bool(t.name)


def is_packed_struct(btf: Btf, type_id: int, pointer_size: int) -> bool:
    """A STRUCT whose layout says packed: a member off its natural
    alignment, or a size that is no multiple of the largest one
    (class__infer_packed_attributes)."""
    t = btf[type_id]
    if t.kind is not Kind.STRUCT:
        return False
    widest = 1
    for m in t.items:
        align = _natural_alignment(btf, m.type, pointer_size)
        if align == 1 or m.bitfield_size:
            continue
        widest = max(widest, align)
        if (m.bit_offset // 8) % align:
            return True
    return t.size % widest != 0


def _natural_alignment(btf: Btf, type_id: int, pointer_size: int, depth: int = 0) -> int:
    t = btf[type_id] if type_id else None
    if t is None or depth > 32:
        return 1
    k = t.kind
    if k in (Kind.TYPEDEF, Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG, Kind.ARRAY):
        return _natural_alignment(btf, t.type, pointer_size, depth + 1)
    if k in (Kind.STRUCT, Kind.UNION):
        return max((_natural_alignment(btf, m.type, pointer_size, depth + 1) for m in t.items),
                   default=1)
    if k is Kind.PTR:
        return pointer_size
    return max(1, t.size)


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
            sec = self.elf.debug_section(section)
            # Only an address's relocations: what a variable's location holds.
            width = self.elf.pointer_size
            address = frozenset(num for num, t in arch_for(self.elf).types.items()
                                if t.width == width)
            m = self.elf.relocations_by_field(sec, width, address) if sec is not None else {}
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
            try:
                index = read_uleb(expr, 1)[0]
            except IndexError:
                raise EncodeError(f"variable '{shown(name)}': DW_AT_location ends inside "
                                  'its DW_OP_addrx operand') from None
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
        if sym.shndx >= len(self.elf.sections):
            raise EncodeError(f'symbol {sym_index} is defined in section {sym.shndx}, '
                              f'the object has {len(self.elf.sections)}')
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
        if not features.global_var and not is_percpu(secname):
            continue
        var_id = loader.add_variable(die, name)
        entries.setdefault(placement.section, []).append((placement, var_id))
        count += 1
    return count


def is_percpu(name: str) -> bool:
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


def _datasec_relocs(datasecs: list[int], placements: list[list[VarPlacement]],
                    offsets: list[int], elf: ElfFile,
                    btf_size: int) -> tuple[dict[str, list[Reloc]], bytes | None]:
    """A relocation for the offset field of every DATASEC entry: on the
    field itself, or, on machines whose kernel addresses need 64 bits, on
    its entry in the address table (returned too; ``addrtable.py``).
    ``datasecs`` are the DATASECs' positions among the types.

    Dedup keeps DATASECs and their entries in order, so the n-th DATASEC of
    the output is the n-th one added.
    """
    arch = arch_for(elf)
    fields = []
    layout = KINDS[Kind.DATASEC]
    for pos, rows in zip(datasecs, placements, strict=True):
        # encode_btf puts the type section right after the header.
        record = BTF_HEADER_LEN + offsets[pos]
        fields += [(record + layout.entry_offset(j, 'offset'), p.symbol, p.addend)
                   for j, p in enumerate(rows)]
    if not arch.wide:
        return {BTF_SECTION: [Reloc(f, sym, arch.abs32, addend) for f, sym, addend in fields]}, None
    table, relocs = encode_table(btf_size, fields, arch, elf.byteorder)
    return {BTF_SECTION: [], ADDR_TABLE: relocs}, table


class Written(NamedTuple):
    """What an encode writes into its object: an ``Encoded``'s sections,
    or those the encode cache kept (``encode_cache.py``)."""
    raw: bytes
    chunk: bytes
    relocs: dict[str, list[Reloc]]
    addrs: bytes | None


def written(enc: Encoded) -> Written:
    return Written(enc.raw, enc.chunk, enc.relocs, enc.addrs)


def write_sections(path: str, elf: ElfFile, out: Written, drop_dwarf: bool = False) -> None:
    """Put .BTF, .BTF.objbtf and the address table if any, with their
    relocations, into the object at ``path``, atomically; with
    ``drop_dwarf``, empty its DWARF sections in the same rewrite."""
    sections = [NewSection(BTF_SECTION, out.raw, addralign=4),
                NewSection(CHUNK_SECTION, out.chunk, addralign=8)]
    if out.addrs is not None:
        sections.append(NewSection(ADDR_TABLE, out.addrs, addralign=8))
    rewrite_object(path, elf, sections, out.relocs, dwarf_sections(elf) if drop_dwarf else ())


def dwarf_sections(elf: ElfFile) -> list[int]:
    """The indices of the object's DWARF sections (``.debug_*``, and the
    legacy compressed ``.zdebug_*``) that hold bytes."""
    return [sec.index for sec in elf.sections
            if sec.size and sec.name.startswith(('.debug_', '.zdebug_'))]


def dwarf_dropped(elf: ElfFile) -> bool:
    """Whether an earlier ``encode --drop-dwarf`` emptied the object's DWARF:
    a compiler never writes an empty .debug_info."""
    sec = elf.debug_section('.debug_info')
    return sec is not None and sec.size == 0


def write_typeless_chunk(path: str, elf: ElfFile, name: str, drop_dwarf: bool = False) -> None:
    """Mark an object without types as seen by objbtf: a ``.BTF.objbtf``
    chunk with its name and no types, and no .BTF (the kernel rejects BTF
    without types).  The link then knows the object lacks nothing.

    An object with a .BTF keeps that section, emptied, and its .rela.BTF
    (or address table) emptied too: objbtf's own from an earlier encode,
    when the object no longer has types (recompiled without -g, stripped),
    which the link would otherwise take with their relocations; or the
    compiler's (GCC -gbtf), when none of its types stays (a unit that only
    declares functions, for which GCC 12 writes BTF no tool reads), which
    ld would put among the objects' BTF the link splits.  Emptied, not
    removed: removing a section renumbers the ones after it, which a tool
    such as strip may have put after .BTF.  An empty .BTF adds nothing to
    what ld concatenates.  ``drop_dwarf`` empties the DWARF sections too
    (DWARF that declares but defines nothing BTF keeps)."""
    chunk = NewSection(CHUNK_SECTION, typeless_chunk(name, elf.byteorder), addralign=8)
    dwarf = dwarf_sections(elf) if drop_dwarf else ()
    if elf.section_by_name(BTF_SECTION) is not None:
        emptied = [NewSection(BTF_SECTION, b'', addralign=4), chunk]
        if elf.section_by_name(ADDR_TABLE) is not None:
            emptied.append(NewSection(ADDR_TABLE, b'', addralign=8))
        rewrite_object(path, elf, emptied, {BTF_SECTION: []}, dwarf)
        return
    rewrite_object(path, elf, [chunk], None, dwarf)
