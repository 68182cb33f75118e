"""Turn the BTF a compiler wrote (GCC's ``-gbtf``) into the types the DWARF
path gives for the same object, by pahole's rules.

GCC 12's ``.BTF`` holds the object's types, but not as pahole would write
them; the loader fixes each:

- a FUNC for every function the unit declares: kept only for the functions
  the object defines (its ELF function symbols), with every parameter
  named, as the DWARF path chooses; FUNC_PROTOs only those FUNCs used go;
- ``INT 'char'`` with encoding SIGNED|CHAR, which the kernel rejects: pahole
  never sets CHAR;
- declaration-only enums as FWD (its header word holds GCC's CTF kind, 8
  for an enum): pahole's ENUM of size 4 without values;
- enum values as 32-bit numbers without the signedness flag, and enums of
  8 bytes as ENUM: read as the signed values GCC stores, then pahole's
  ENUM/ENUM64 rule.  GCC drops the enumerators whose value does not fit in
  32 bits: they stay missing (README: compiler BTF);
- multi-dimensional arrays as nested ARRAYs (inner dimension outermost)
  indexed by ``long unsigned int``: one ARRAY of the product indexed by the
  unit's ``int``, as pahole flattens them;
- every variable (extern ones too) in one DATASEC per section with offsets
  0: the VARs pahole would encode (by the features) are placed by their ELF
  symbols, and the encoder rebuilds the DATASECs with relocations.

An object objbtf has encoded has objbtf's own ``.BTF``, which is no source:
``encode_file`` never hands it here.
"""
from __future__ import annotations

from collections import namedtuple

from ..btf.errors import BtfError
from ..btf.kinds import (
    FUNC_STATIC, INT_BOOL, INT_SIGNED, KINDS, VAR_GLOBAL_ALLOCATED, VAR_STATIC, Kind,
)
from ..btf.reader import parse_btf
from ..btf.types import Btf, BtfType, Enumerator, gc_paused
from ..elf.consts import SHN_LORESERVE, STB_GLOBAL, STB_WEAK, STT_FUNC, STT_NOTYPE, STT_OBJECT
from ..elf.reader import ElfFile, Symbol
from ..encoder import (BTF_SECTION, SKIPPED_VAR_PREFIXES, Encoded, VarPlacement,
                       finish_encoding, is_percpu)
from ..features import Features
from ..functions import FACT_WEAK, function_key, function_keys
from ..rules import base_type, declared_enum, enum_type

#: The CTF kind GCC leaves in a FWD's header word for a forward enum
#: (6 and 7 are struct and union).
CTF_K_ENUM = 8
MAX_DEPTH = 32


class Loaded(namedtuple('Loaded', 'btf entries functions variables facts')):
    """Amended types, each chosen variable's placement by section, counts,
    the functions' facts for the link (``objbtf.functions``): only
    FACT_WEAK, which the symbols give; GCC's BTF has no parameter
    locations for the others."""
    __slots__ = ()


def encode_compiler_btf(elf: ElfFile, features: Features, name: str) -> Encoded:
    """Encode an object from the compiler's BTF in its .BTF section."""
    sec = elf.section_by_name(BTF_SECTION)
    loaded = load_compiler_btf(elf, elf.section_data(sec), features)
    return finish_encoding(loaded.btf, elf, loaded.entries, name, loaded.functions,
                           loaded.variables, loaded.facts, source="its compiler's BTF")


def load_compiler_btf(elf: ElfFile, data: bytes, features: Features) -> Loaded:
    return _Loader(elf, parse_btf(data), features).load()


class _Loader:
    def __init__(self, elf: ElfFile, src: Btf, features: Features):
        self.elf = elf
        self.types = src.types
        self.f = features
        self.pointer_size = 4 if elf.elf_class == 32 else 8
        defined = [s for s in elf.symbols() if s.name and 0 < s.shndx < SHN_LORESERVE]
        self.keys, self.weak = function_keys(defined)
        self.chosen: set[str] = set()
        self.functions: dict[str, Symbol] = {}
        self.objects: dict[str, Symbol] = {}
        for s in defined:
            if s.type == STT_FUNC:
                key = function_key(s.name)
                if key is not None:
                    self.functions.setdefault(key, s)
            elif s.type in (STT_OBJECT, STT_NOTYPE):
                self.objects.setdefault(s.name, s)
        self.placements: dict[int, VarPlacement] = {}
        self.placed: set[str] = set()

    def load(self) -> Loaded:
        with gc_paused():
            keep = self._choose()
            order, new_id, index_type = self._number(self._order(keep))
            # Amended first, renumbered after: flattening an ARRAY reads the
            # compiler's ids of the arrays it folds.
            chosen = [self._amended(self.types[i]) for i in order]
            out = Btf(byteorder=self.elf.byteorder)
            remap = new_id.__getitem__
            n_funcs = 0
            for i, t in zip(order, chosen):
                t.remap(remap)
                k = t.kind
                if k is Kind.ARRAY:
                    t.index_type = index_type
                elif k is Kind.VAR:
                    t.linkage = self._var_linkage(i)
                elif k is Kind.FUNC:
                    n_funcs += 1
                out.add(t)
        if index_type == out.next_id:
            out.add(BtfType(Kind.INT, 'int', size=4, encoding=INT_SIGNED, bits=32))
        entries: dict[int, list[tuple[VarPlacement, int]]] = {}
        for i, p in self.placements.items():
            entries.setdefault(p.section, []).append((p, new_id[i]))
        facts = {n: FACT_WEAK for n in self.chosen if n in self.weak}
        return Loaded(out, entries, n_funcs, len(self.placements), facts)

    # ---- which types stay ------------------------------------------------

    def _choose(self) -> list[bool]:
        """Per type id, whether it stays: functions and variables as the
        DWARF path chooses them, no DATASEC (the encoder makes its own),
        FUNC_PROTOs only for what still uses them, nested ARRAYs folded
        into the outer one, DECL_TAGs of what stays."""
        types = self.types
        n = len(types)
        keep = [True] * n
        keep[0] = False
        named: set[str] = set()
        proto_users: set[int] = set()     # what kept types but FUNC_PROTOs refer to
        array_users: set[int] = set()     # what kept types but ARRAYs refer to
        inner: set[int] = set()           # the elements of ARRAYs
        for i, t in enumerate(types):
            k = t.kind
            if k is Kind.DATASEC:
                keep[i] = False
                continue
            if k is Kind.FUNC:
                keep[i] = self._wants_function(t, named)
            elif k is Kind.VAR:
                keep[i] = self.f.var and self._place(i, t)
            elif k is Kind.DECL_TAG:
                keep[i] = self.f.decl_tag
            if not keep[i]:
                continue
            refs = t.refs()
            if refs and max(refs) >= n:
                raise BtfError(f'type {i} ({k.name}) refers to type {max(refs)}, '
                               f'the BTF has {n - 1}')
            if k is not Kind.FUNC_PROTO:
                proto_users.update(refs)
            if k is Kind.ARRAY:         # (a FUNC_PROTO never refers to an ARRAY)
                inner.add(t.type)
            else:
                array_users.update(refs)
        for i, t in enumerate(types):
            k = t.kind
            if k is Kind.FUNC_PROTO:
                keep[i] = i in proto_users
            elif k is Kind.ARRAY and i in inner and i not in array_users:
                keep[i] = False
            elif k is Kind.DECL_TAG and keep[i]:
                keep[i] = keep[t.type]
        return keep

    def _wants_function(self, t: BtfType, named: set[str]) -> bool:
        """pahole's choice, as the DWARF path makes it: a function this
        object defines, every parameter named, the first of its name."""
        if t.name not in self.keys or t.name in named:
            return False
        proto = self.types[t.type] if t.type < len(self.types) else None
        if proto is None or proto.kind is not Kind.FUNC_PROTO:
            raise BtfError(f'FUNC {t.name!r} does not point to a FUNC_PROTO')
        if any(not p.name for p in proto.items if p.type):
            return False
        named.add(t.name)
        self.chosen.add(t.name)
        return True

    def _place(self, i: int, t: BtfType) -> bool:
        """Whether VAR ``i`` is one pahole encodes, recording where its
        symbol puts it: a definition (a defined data symbol of its exact
        name: GCC names function-scope statics NAME.N) of a non-empty type,
        not a name pahole skips, in a percpu section unless ``global_var``."""
        if t.name in self.placed or t.name.startswith(SKIPPED_VAR_PREFIXES):
            return False
        sym = self.objects.get(t.name)
        if sym is None or sym.shndx >= len(self.elf.sections):
            return False
        size = self._size(t.type)
        if size == 0:
            return False
        if not self.f.global_var and not is_percpu(self.elf.sections[sym.shndx].name):
            return False
        self.placed.add(t.name)
        self.placements[i] = VarPlacement(sym.shndx, sym.value, sym.index, 0, sym.size or size)
        return True

    def _size(self, type_id: int, depth: int = 0) -> int:
        """Byte size of a type (0 for void, functions, or too deep a chain)."""
        if depth > MAX_DEPTH or type_id >= len(self.types):
            return 0
        t = self.types[type_id]
        k = t.kind
        if k in KINDS.sized and k is not Kind.DATASEC:
            return t.size
        if k is Kind.PTR:
            return self.pointer_size
        if k in KINDS.modifier:
            return self._size(t.type, depth + 1)
        if k is Kind.ARRAY:
            return t.nelems * self._size(t.type, depth + 1)
        return 0

    # ---- new ids ---------------------------------------------------------

    def _order(self, keep: list[bool]) -> list[int]:
        """The kept types in output order: the compiler's, but GCC writes
        FUNCs and VARs in an order that changes from one compile to the
        next, so they go last, each by its symbol's place and followed by
        its DECL_TAGs."""
        types = self.types
        body: list[int] = []
        funcs: list[int] = []
        variables: list[int] = []
        tags_of: dict[int, list[int]] = {}
        for i, t in enumerate(types):
            if not keep[i]:
                continue
            k = t.kind
            if k is Kind.FUNC:
                funcs.append(i)
            elif k is Kind.VAR:
                variables.append(i)
            elif k is Kind.DECL_TAG and types[t.type].kind in (Kind.FUNC, Kind.VAR):
                tags_of.setdefault(t.type, []).append(i)
            else:
                body.append(i)
        fsym = self.functions
        funcs.sort(key=lambda i: _place_key(fsym[types[i].name]))
        variables.sort(key=lambda i: _place_key(self.elf.symbols()[self.placements[i].symbol]))
        for i in funcs + variables:
            body.append(i)
            body += tags_of.get(i, ())
        return body

    def _number(self, order: list[int]) -> tuple[list[int], list[int], int]:
        """The new id of each type, by ``order``; ``order`` without the
        TYPE_TAGs the features leave out (each stands for its target); the
        arrays' index type: the unit's ``int``, or one added after the
        types."""
        types = self.types
        new_id = [0] * len(types)
        emitted: list[int] = []
        dropped_tags: list[int] = []
        index_type = 0
        has_array = False
        for i in order:
            t = types[i]
            if t.kind is Kind.TYPE_TAG and not self.f.type_tag:
                dropped_tags.append(i)
                continue
            emitted.append(i)
            new_id[i] = len(emitted)
            if not index_type and _is_int(t):
                index_type = len(emitted)
            has_array = has_array or t.kind is Kind.ARRAY
        for i in dropped_tags:
            new_id[i] = new_id[self._past_tags(i)]
        if has_array and not index_type:
            index_type = len(emitted) + 1
        return emitted, new_id, index_type

    def _past_tags(self, i: int) -> int:
        for _ in range(MAX_DEPTH):
            if self.types[i].kind is not Kind.TYPE_TAG:
                return i
            i = self.types[i].type
        raise BtfError(f'type {i}: TYPE_TAG chain longer than {MAX_DEPTH}')

    def _var_linkage(self, i: int) -> int:
        sym = self.placements[i]
        bind = self.elf.symbols()[sym.symbol].bind
        return VAR_GLOBAL_ALLOCATED if bind in (STB_GLOBAL, STB_WEAK) else VAR_STATIC

    # ---- pahole's form ---------------------------------------------------

    def _amended(self, t: BtfType) -> BtfType:
        """The compiler's type in pahole's form: ``t`` itself when only its
        ids change (they are renumbered after; an ARRAY's index type is set
        after too)."""
        k = t.kind
        if k is Kind.INT:
            return base_type(t.name, t.size, t.encoding & (INT_SIGNED | INT_BOOL), False, self.f)
        if k is Kind.FLOAT:
            return base_type(t.name, t.size, 0, True, self.f)
        if k is Kind.ENUM:
            values = [Enumerator(e.name, _s32(e.value)) for e in t.items]
            return enum_type(t.name, t.size, values, any(v.value < 0 for v in values), self.f)
        if k is Kind.ENUM64:
            return enum_type(t.name, t.size, list(t.items), t.signed, self.f)
        if k is Kind.FWD:
            if t.type == CTF_K_ENUM:
                return declared_enum(t.name)
            fwd = BtfType(Kind.FWD, t.name)
            fwd.fwd_union = t.fwd_union
            return fwd
        if k is Kind.ARRAY:
            return self._flat_array(t)
        if k is Kind.FUNC:
            t.linkage = FUNC_STATIC
        return t

    def _flat_array(self, t: BtfType) -> BtfType:
        """One ARRAY for a chain of nested ones, of the product of their
        element counts."""
        nelems, elem = t.nelems, t.type
        for _ in range(MAX_DEPTH):
            if elem >= len(self.types):
                raise BtfError(f'an ARRAY refers to type {elem}, the BTF has {len(self.types) - 1}')
            inner = self.types[elem]
            if inner.kind is not Kind.ARRAY:
                break
            nelems *= inner.nelems
            elem = inner.type
        return BtfType(Kind.ARRAY, type=elem, nelems=nelems & 0xffffffff)


def _place_key(sym: Symbol) -> tuple[int, int, str]:
    return (sym.shndx, sym.value, sym.name)


def _is_int(t: BtfType) -> bool:
    return t.kind is Kind.INT and t.name == 'int' and t.size == 4 and t.encoding & INT_SIGNED


def _s32(v: int) -> int:
    v &= 0xffffffff
    return v - (1 << 32) if v >= 1 << 31 else v
