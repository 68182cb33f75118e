"""Turn the BTF a compiler wrote (GCC's ``-gbtf``) into the types the DWARF
path gives for the same object, by pahole's rules.

GCC 12's ``.BTF`` holds the object's types, but not as pahole would write
them; the loader fixes each:

- a FUNC for every function the unit declares: kept only for the functions
  the object defines and GCC compiled (its ELF function symbols where the
  call frame information starts a function: ``compiled_starts``), with
  every parameter named, as the DWARF path chooses; FUNC_PROTOs only those
  FUNCs used go;
- ``INT 'char'`` with encoding SIGNED|CHAR, which the kernel rejects: pahole
  never sets CHAR;
- declaration-only enums as FWD, of struct: pahole's ENUM of size 4 without
  values, for the FWDs ``_enum_forwards`` finds;
- enum values as 32-bit numbers without the signedness flag, and enums of
  8 bytes as ENUM: read as the signed values GCC stores, then pahole's
  ENUM/ENUM64 rule.  GCC drops the enumerators whose value does not fit in
  32 bits: they stay missing (docs/dwarfless.md), and the chunk counts
  the enums that show it (``_losses``);
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

from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from typing import Any, Final, cast

from .. import c_extension
from ..btf.chunk import FROM_COMPILER_BTF, LOST_ALL_ENUMERATORS, LOST_WIDE_ENUMERATORS
from ..btf.errors import BtfError
from ..btf.kinds import (
    INT_BOOL, INT_SIGNED, KINDS, VAR_GLOBAL_ALLOCATED, VAR_STATIC, Kind,
    ARRAY as _ARRAY, DATASEC as _DATASEC, DECL_TAG as _DECL_TAG, ENUM as _ENUM,
    ENUM64 as _ENUM64, FLOAT as _FLOAT, FUNC as _FUNC, FUNC_PROTO as _FUNC_PROTO, FWD as _FWD,
    INT as _INT, PTR as _PTR, TYPE_TAG as _TYPE_TAG, VAR as _VAR,
)
from ..btf.types import VOID, Btf, BtfType, Enumerator, Member, Param, gc_paused, new_type
from ..btf.reader import parse_btf
from ..elf.consts import SHN_LORESERVE, STB_GLOBAL, STB_WEAK, STT_FUNC, STT_NOTYPE, STT_OBJECT
from ..elf.reader import ElfFile, Symbol
from ..encode.encoder import (BTF_SECTION, SKIPPED_VAR_PREFIXES, Encoded, Loaded, VarPlacement,
                       finish_encoding, is_percpu, uncertain_location)
from ..features import Features
from ..btf.function_rules import FACT_UNCERTAIN_LOC, FACT_WEAK, function_key, function_keys
from ..btf.type_rules import base_type, declared_enum, enum_type

#: GCC 12 leaves its CTF kind in a FWD's header word (struct 6, union 7,
#: enum 8), renumbered though as if it were a type id: where the object's
#: BTF left out types below it, it is smaller (kernel/topology.o of a small
#: x86_64 config: its structs' 0, its enum's 7).  Above a struct's 6, a
#: FWD that is not a union's can only be an enum's.
CTF_K_STRUCT = 6
MAX_DEPTH = 32
_COMPOSITE = KINDS.composite
_SIZED = KINDS.sized
_MODIFIERS = KINDS.modifier
_ONE_REF = KINDS.one_ref
#: Kinds that stay as the compiler wrote them but for their ids (and a
#: FUNC's or VAR's linkage): built from their heads.
_PLAIN_REFERENCES = _ONE_REF - {Kind.DECL_TAG}
_new = tuple.__new__


def encode_compiler_btf(elf: ElfFile, features: Features, name: str) -> Encoded:
    """Encode an object from the compiler's BTF in its .BTF section."""
    sec = elf.section_by_name(BTF_SECTION)
    assert sec is not None          # encode_file looked first
    loaded = load_compiler_btf(elf, elf.section_data(sec), features)
    return finish_encoding(loaded.btf, elf, loaded.entries, name, loaded.functions,
                           loaded.variables, loaded.facts, FROM_COMPILER_BTF, loaded.losses)


def load_compiler_btf(elf: ElfFile, data: bytes, features: Features) -> Loaded:
    """The types of the compiler's BTF ``data``, amended to pahole's rules.
    The functions' facts are FACT_WEAK, which the symbols give, and
    FACT_UNCERTAIN_LOC, which the prototype's types give: GCC's BTF has no
    parameter locations, nor a clone's own parameters, for the others.

    The compiled build loads them in C (``_amend.c``), which reads the blob
    itself; where it gives up, as where it is not built, ``_Loader`` does,
    on parse_btf's scan of the blob, with its own result or error."""
    loaded = c_load(elf, data, features) if _C is not None else None
    return loaded if loaded is not None else python_load(elf, data, features)


def c_load(elf: ElfFile, data: bytes, features: Features) -> Loaded | None:
    """What the C loader makes of ``data``, or None where it gives up."""
    symbols = _Symbols(elf, features)
    with gc_paused():
        made = _C.load(data, symbols, symbols.keys, symbols.sort_keys(), features, features.var,
                       features.decl_tag, features.type_tag, elf.pointer_size)
        if made is None:
            return None
        types, index_type, new_ids, chosen, losses = made
        symbols.chosen.update(chosen)
        return symbols.loaded(types, index_type, new_ids.__getitem__, losses)


def python_load(elf: ElfFile, data: bytes, features: Features) -> Loaded:
    """What ``_Loader`` makes of ``data`` (raising where it is broken)."""
    offsets: list[int] = []
    words: list[int] = []
    src = parse_btf(data, offsets=offsets, words=words)
    return _Loader(_Symbols(elf, features), src, offsets, words, features).load()


class _Symbols:
    """What the object's symbols decide for the compiler's types: the
    functions it defines (FUNCs chosen, in ``chosen``), where each VAR
    pahole encodes is (``placements``), and the order of both in the
    output; shared by ``_Loader`` and the C loader, which calls ``place``."""

    def __init__(self, elf: ElfFile, features: Features):
        self.elf = elf
        self.f = features
        defined = [s for s in elf.symbols() if s.name and 0 < s.shndx < SHN_LORESERVE]
        starts = compiled_starts(elf)
        self.keys, self.weak = function_keys(
            defined if starts is None else
            [s for s in defined if s.type != STT_FUNC or (s.shndx, s.value) in starts])
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
        self.aliases = _aliases(defined)
        self.placements: dict[int, VarPlacement] = {}
        self.placed: set[str] = set()

    def place(self, i: int, name: str, size: int) -> tuple[tuple[int, int, str], int] | None:
        """Whether VAR ``i``, of a type of ``size`` bytes, is one pahole
        encodes, recording where its symbol puts it: a definition (a defined
        data symbol of its exact name: GCC names function-scope statics
        NAME.N) of a non-empty type, not a name pahole skips, in a percpu
        section unless ``global_var``.  If so, its sort key and linkage."""
        if name in self.placed or name in self.aliases or name.startswith(SKIPPED_VAR_PREFIXES):
            return None
        sym = self.objects.get(name)
        if sym is None or sym.shndx >= len(self.elf.sections) or size == 0:
            return None
        if not self.f.global_var and not is_percpu(self.elf.sections[sym.shndx].name):
            return None
        self.placed.add(name)
        self.placements[i] = VarPlacement(sym.shndx, sym.value, sym.index, 0, sym.size or size)
        return _place_key(sym), self.linkage(i)

    def linkage(self, i: int) -> int:
        """The linkage of placed VAR ``i``, by its symbol's binding."""
        bind = self.elf.symbols()[self.placements[i].symbol].bind
        return VAR_GLOBAL_ALLOCATED if bind in (STB_GLOBAL, STB_WEAK) else VAR_STATIC

    def sort_keys(self) -> dict[str, tuple[int, int, str]]:
        """Each defined function's sort key (its symbol's place), by its key."""
        return {key: _place_key(sym) for key, sym in self.functions.items()}

    def loaded(self, chosen: list[BtfType], index_type: int,
               new_id: Callable[[int], int], losses: list[tuple[int, str]]) -> Loaded:
        """The result: the kept types ``chosen`` in order, the arrays'
        index type added if it is past them, the placed VARs by section
        with their new ids (``new_id`` of their source ids), ``losses``."""
        n_funcs = sum([t.kind is _FUNC for t in chosen])
        out = Btf(types=[VOID, *chosen], byteorder=self.elf.byteorder)
        if index_type == out.next_id:
            out.add(BtfType(Kind.INT, 'int', size=4, encoding=INT_SIGNED, bits=32))
        entries: dict[int, list[tuple[VarPlacement, int]]] = {}
        for i, p in self.placements.items():
            entries.setdefault(p.section, []).append((p, new_id(i)))
        facts = {n: FACT_WEAK for n in self.chosen if n in self.weak}
        machine, pointer_size = self.elf.machine, self.elf.pointer_size
        for t in chosen:
            if t.kind is _FUNC and uncertain_location(out, out[t.type], machine, pointer_size):
                facts[t.name] = facts.get(t.name, 0) | FACT_UNCERTAIN_LOC
        return Loaded(out, entries, n_funcs, len(self.placements), facts, losses)


class _Loader:
    """The compiler's types are read from the parser's scan of the blob:
    each type's head and its words.  Most of what is dropped (FUNCs,
    FUNC_PROTOs, VARs) is never built, and what stays is built with its new
    ids from the words (structs, unions, prototypes, references) or parsed
    and renumbered (the few that are amended).  ``_amend.c`` is its twin."""

    def __init__(self, symbols: _Symbols, src: Btf, offsets: list[int], words: list[int],
                 features: Features):
        self.sym = symbols
        self.elf = symbols.elf
        self.types = src                  # parsed when looked up
        self.n = src.next_id
        self.heads = [(Kind.UNKN, '', 0, 0, 0), *src.heads()]
        self.words = words
        self.at = [0, *[off >> 2 for off in offsets]]    # where each type's words start
        assert src.strings is not None      # parse_btf's tables have theirs
        self.names = src.strings
        self.f = features
        self.pointer_size = self.elf.pointer_size

    def load(self) -> Loaded:
        with gc_paused():
            keep = self._choose()
            enum_forwards = self._enum_forwards(keep)
            order, new_id, index_type = self._number(self._order(keep))
            chosen = self._build(order, new_id, index_type, enum_forwards)
            return self.sym.loaded(chosen, index_type, new_id.__getitem__, self._losses())

    def _build(self, order: list[int], new_id: list[int], index_type: int,
               enum_forwards: set[int]) -> list[BtfType]:
        """The types of ``order`` in pahole's form, with their new ids: built
        from their heads and words where they stay as the compiler wrote
        them but for ids (entries made by C-level maps, not one by one),
        parsed and renumbered where ``_amended`` changes more; the FWDs of
        ``enum_forwards`` become enums without values."""
        heads, words, at, types = self.heads, self.words, self.at, self.types
        names, ids = self.names.__getitem__, new_id.__getitem__
        out = []
        for i in order:
            k, name, st, vlen, detail = heads[i]
            w = at[i]
            kflag = words[w + 1] >> 31
            if k in _PLAIN_REFERENCES:
                # (a FUNC's linkage, 0, is static: GCC's is not pahole's)
                t = BtfType(k, name, 0, new_id[st], kflag)
                if k is _VAR:
                    t.linkage = self.sym.linkage(i)
            elif k in _COMPOSITE:
                end = w + 3 + 3 * vlen
                offsets: Iterable[int] = words[w + 5:end:3]
                bits: Iterable[int] = repeat(0, vlen)
                if kflag:
                    offsets, bits = [o & 0xffffff for o in offsets], [o >> 24 for o in offsets]
                members = zip(map(names, words[w + 3:end:3]), map(ids, words[w + 4:end:3]),
                              offsets, bits)
                t = BtfType(k, name, st, 0, kflag, 0, 0, 0, 0, 0, 0, -1,
                            tuple(map(_new, repeat(Member), members)))
            elif k is _FUNC_PROTO:
                end = w + 3 + 2 * vlen
                params = zip(map(names, words[w + 3:end:2]), map(ids, words[w + 4:end:2]))
                t = BtfType(k, name, 0, new_id[st], kflag, 0, 0, 0, 0, 0, 0, -1,
                            tuple(map(_new, repeat(Param), params)))
            elif k is _ARRAY:
                elem, nelems = self._flat_array(st, cast(int, detail))
                t = BtfType(k, '', 0, new_id[elem], 0, 0, 0, 0, index_type, nelems)
            elif k is _FWD:
                t = declared_enum(name) if i in enum_forwards else BtfType(k, name, 0, 0, kflag)
            else:
                t = self._amended(types[i])
                t.remap(ids)
            out.append(t)
        return out

    def _enum_forwards(self, keep: list[bool]) -> set[int]:
        """The FWDs that are enums' declarations: by their header word
        (CTF_K_STRUCT), or by their use: the return or a parameter type
        (past typedefs and modifiers) of a function type that stays, which
        in C may be a declared enum but in the kernel's BTF never a FWD
        (which has no size)."""
        heads, words, at, n = self.heads, self.words, self.at, self.n
        out: set[int] = set()
        protos: list[int] = []
        for i, (k, _, st, _, _) in enumerate(heads):
            if k is _FWD:
                if st > CTF_K_STRUCT and not words[at[i] + 1] >> 31:
                    out.add(i)
            elif k is _FUNC_PROTO and keep[i]:
                protos.append(i)
        for i in protos:
            _, _, st, vlen, _ = heads[i]
            w = at[i]
            for ref in (st, *words[w + 4:w + 3 + 2 * vlen:2]):
                for _ in range(MAX_DEPTH):
                    if not 0 < ref < n or heads[ref][0] not in _MODIFIERS:
                        break
                    ref = heads[ref][2]
                if 0 < ref < n and heads[ref][0] is _FWD and not words[at[ref] + 1] >> 31:
                    out.add(ref)
        return out

    def _losses(self) -> list[tuple[int, str]]:
        """What GCC's enums show it lost, as (chunk.LOST_*, name), in id
        order.  GCC 12 writes only the enumerators whose value fits in 32
        bits, signed (or whose 64 bits sign-extend from 32: an unsigned
        0xffffffffffffffff as -1).  So an ENUM without enumerators (C
        allows none such, and GCC writes a declared enum as a FWD) lost
        them all, and one of 8 bytes whose enumerators all fit in 31 bits
        lost the value that made it 8 bytes.  An 8-byte one with a negative
        value, or a 4-byte one that lost only some (an unsigned value from
        2^31), looks whole."""
        words, at = self.words, self.at
        out = []
        for i, (k, name, size, vlen, _) in enumerate(self.heads):
            if k is not _ENUM or not size:
                continue
            if not vlen:
                out.append((LOST_ALL_ENUMERATORS, name))
            elif size > 4 and max(words[at[i] + 4:at[i] + 3 + 2 * vlen:2]) < 1 << 31:
                out.append((LOST_WIDE_ENUMERATORS, name))
        return out

    # ---- which types stay ------------------------------------------------

    def _choose(self) -> list[bool]:
        """Per type id, whether it stays: functions and variables as the
        DWARF path chooses them, no DATASEC (the encoder makes its own),
        FUNC_PROTOs only for what still uses them, nested ARRAYs folded
        into the outer one, DECL_TAGs of what stays.  FUNCs, VARs,
        DATASECs and FUNC_PROTOs are decided on their heads (what they
        refer to is all there)."""
        types, heads, n, words, at = self.types, self.heads, self.n, self.words, self.at
        keep = [True] * n
        keep[0] = False
        named: set[str] = set()
        proto_users: set[int] = set()     # what kept types but FUNC_PROTOs refer to
        array_users: set[int] = set()     # what kept types but ARRAYs refer to
        inner: set[int] = set()           # the elements of ARRAYs
        var, decl_tag, keys = self.f.var, self.f.decl_tag, self.sym.keys
        for i in range(1, n):
            k, name, st, vlen, detail = heads[i]
            if k in _PLAIN_REFERENCES:
                # (most FUNCs are declarations: rejected before the call)
                if k is _FUNC and (name not in keys or not self._wants_function(name, st, named)):
                    keep[i] = False
                    continue
                if k is _VAR and not (var and self._place(i, name, st)):
                    keep[i] = False
                    continue
                if st >= n:
                    self._refers_past(i, k, st)
                proto_users.add(st)
                array_users.add(st)
                continue
            if k is _FUNC_PROTO:
                params = cast(tuple, detail)
                if st >= n or (params and max(params) >= n):
                    self._refers_past(i, k, max((st, *params)))
                array_users.add(st)
                array_users.update(params)
                continue
            if k is _DATASEC:
                keep[i] = False
                continue
            refs: Sequence[int]
            if k in _COMPOSITE:
                w = at[i]
                refs = words[w + 4:w + 3 + 3 * vlen:3]
            elif k is _ARRAY:
                refs = (st, words[at[i] + 4])
            elif k is _DECL_TAG:
                keep[i] = decl_tag
                if not decl_tag:
                    continue
                refs = (st,)
            else:
                refs = types[i].refs()
            if refs and max(refs) >= n:
                self._refers_past(i, k, max(refs))
            proto_users.update(refs)
            if k is _ARRAY:             # (a FUNC_PROTO never refers to an ARRAY)
                inner.add(st)
            else:
                array_users.update(refs)
        for i in range(1, n):
            k = heads[i][0]
            if k is _FUNC_PROTO:
                keep[i] = i in proto_users
            elif k is _ARRAY and i in inner and i not in array_users:
                keep[i] = False
            elif k is _DECL_TAG and keep[i]:
                keep[i] = keep[heads[i][2]]
        return keep

    def _refers_past(self, i: int, k: Kind, ref: int) -> None:
        raise BtfError(f'type {i} ({k.name}) refers to type {ref}, the BTF has {self.n - 1}')

    def _wants_function(self, name: str, proto_id: int, named: set[str]) -> bool:
        """pahole's choice, as the DWARF path makes it: a function this
        object defines, every parameter named, the first of its name."""
        if name not in self.sym.keys or name in named:
            return False
        proto = self.types[proto_id] if proto_id < self.n else None
        if proto is None or proto.kind is not Kind.FUNC_PROTO:
            raise BtfError(f'FUNC {name!r} does not point to a FUNC_PROTO')
        if any(not p.name for p in proto.items if p.type):
            return False
        named.add(name)
        self.sym.chosen.add(name)
        return True

    def _place(self, i: int, name: str, type_id: int) -> bool:
        """Whether VAR ``i`` is one pahole encodes (``_Symbols.place``)."""
        return self.sym.place(i, name, self._size(type_id)) is not None

    def _size(self, type_id: int, depth: int = 0) -> int:
        """Byte size of a type (0 for void, functions, or too deep a chain)."""
        if depth > MAX_DEPTH or type_id >= self.n:
            return 0
        k, _, size_or_type, _, nelems = self.heads[type_id]
        if k in _SIZED and k is not _DATASEC:
            return size_or_type
        if k is _PTR:
            return self.pointer_size
        if k in _MODIFIERS:
            return self._size(size_or_type, depth + 1)
        if k is _ARRAY:
            return cast(int, nelems) * self._size(size_or_type, depth + 1)
        return 0

    # ---- new ids ---------------------------------------------------------

    def _order(self, keep: list[bool]) -> list[int]:
        """The kept types in output order: the compiler's, but GCC writes
        FUNCs and VARs in an order that changes from one compile to the
        next, so they go last, each by its symbol's place and followed by
        its DECL_TAGs."""
        heads = self.heads
        body: list[int] = []
        funcs: list[int] = []
        variables: list[int] = []
        tags_of: dict[int, list[int]] = {}
        for i in compress(range(self.n), keep):
            k, _, target, _, _ = heads[i]
            if k is _FUNC:
                funcs.append(i)
            elif k is _VAR:
                variables.append(i)
            elif k is _DECL_TAG and heads[target][0] in (_FUNC, _VAR):
                tags_of.setdefault(target, []).append(i)
            else:
                body.append(i)
        fsym, placements = self.sym.functions, self.sym.placements
        funcs.sort(key=lambda i: _place_key(fsym[heads[i][1]]))
        variables.sort(key=lambda i: _place_key(self.elf.symbols()[placements[i].symbol]))
        for i in funcs + variables:
            body.append(i)
            body += tags_of.get(i, ())
        return body

    def _number(self, order: list[int]) -> tuple[list[int], list[int], int]:
        """The new id of each type, by ``order``; ``order`` without the
        TYPE_TAGs the features leave out (each stands for its target); the
        arrays' index type: the unit's ``int``, or one added after the
        types."""
        heads = self.heads
        new_id = [0] * self.n
        emitted: list[int] = []
        dropped_tags: list[int] = []
        index_type = 0
        has_array = False
        type_tag = self.f.type_tag
        for i in order:
            k = heads[i][0]
            if k is _TYPE_TAG and not type_tag:
                dropped_tags.append(i)
                continue
            emitted.append(i)
            new_id[i] = len(emitted)
            if not index_type and k is _INT and _is_int(self.types[i]):
                index_type = len(emitted)
            has_array = has_array or k is _ARRAY
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

    # ---- pahole's form ---------------------------------------------------

    def _amended(self, t: BtfType) -> BtfType:
        """The compiler's base type or enum in pahole's form (any other
        type is ``t`` itself)."""
        k = t.kind
        if k is _INT:
            return base_type(t.name, t.size, t.encoding & (INT_SIGNED | INT_BOOL), False, self.f)
        if k is _FLOAT:
            return base_type(t.name, t.size, 0, True, self.f)
        if k is _ENUM:
            # (GCC's values are 32 bits, signed)
            values = [_new(Enumerator, (n, v - (1 << 32) if v >= 1 << 31 else v))
                      for n, v in t.items]
            return enum_type(t.name, t.size, values, any([v < 0 for _, v in values]), self.f)
        if k is _ENUM64:
            return enum_type(t.name, t.size, list(t.items), t.signed, self.f)
        return t

    def _flat_array(self, elem: int, nelems: int) -> tuple[int, int]:
        """The element type and count of one ARRAY for a chain of nested
        ones: the product of their element counts (in 32 bits)."""
        for _ in range(MAX_DEPTH):
            if elem >= self.n:
                raise BtfError(f'an ARRAY refers to type {elem}, the BTF has {self.n - 1}')
            k, _, inner_elem, _, inner_nelems = self.heads[elem]
            if k is not _ARRAY:
                break
            nelems *= cast(int, inner_nelems)
            elem = inner_elem
        return elem, nelems & 0xffffffff


def compiled_starts(elf: ElfFile) -> set[tuple[int, int]] | None:
    """Where the functions the compiler compiled start, (section, offset),
    by the object's call frame information; None if it has none.

    GCC's BTF has a FUNC for every function the unit declares, with the
    same linkage whether it defines it or not (GCC 12 writes 0 for all),
    so a function the unit declares in C and defines in top-level assembly
    (the x86 static call trampolines, ``__SCT__*``; ``nop_func``) looks
    defined to the symbols alone; its DWARF is a declaration, and the
    DWARF path gives it no FUNC.  GCC, -gbtf or not, writes a frame
    description entry (``.debug_frame``, or ``.eh_frame`` with unwind
    tables) for each function it compiles, clones and ``.cold`` parts
    too, and top-level assembly gets one only from ``.cfi_startproc``.
    Every relocation of those sections is taken: the entries' initial
    locations name each function's start, the others (a CIE pointer in
    ``.debug_frame``) no function's."""
    starts: set[tuple[int, int]] | None = None
    for name, width in (('.debug_frame', elf.pointer_size), ('.eh_frame', 4)):
        sec = elf.section_by_name(name)
        if sec is None or not sec.size:
            continue
        if starts is None:
            starts = set()
        symbols = elf.symbols()
        for sym_index, addend in elf.relocations_by_field(sec, width).values():
            sym = symbols[sym_index]
            starts.add((sym.shndx, sym.value + addend))
    return starts


def _aliases(defined: list[Symbol]) -> set[str]:
    """Data symbols that name an object an earlier symbol already names
    (same section, address and size): aliases (``__attribute__((alias))``,
    Linux 7.x's ``SYM_PIC_ALIAS``), which GCC's BTF lists as VARs of their
    own but DWARF only declares, so pahole encodes the object once, under
    its own name."""
    first: dict[tuple[int, int, int], str] = {}
    aliases: set[str] = set()
    for s in sorted(defined, key=lambda s: s.index):
        if s.type != STT_OBJECT or not s.size:
            continue
        where = (s.shndx, s.value, s.size)
        if where in first:
            aliases.add(s.name)
        else:
            first[where] = s.name
    return aliases


def _place_key(sym: Symbol) -> tuple[int, int, str]:
    return (sym.shndx, sym.value, sym.name)


def _is_int(t: BtfType) -> bool:
    return t.kind is Kind.INT and t.name == 'int' and t.size == 4 and bool(t.encoding & INT_SIGNED)


def _c_loader() -> Any:
    """objbtf.compiler_btf._amend, told what this loader makes, when the
    compiled build runs and has it; else None."""
    amend = c_extension('objbtf.compiler_btf._amend')
    if amend is None:
        return None
    amend.init(new_type, [i.kind for i in KINDS], Member, Param, Enumerator,
               base_type, enum_type, declared_enum)
    return amend


_C: Final = _c_loader()
