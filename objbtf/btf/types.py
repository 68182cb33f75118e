"""The in-memory BTF model shared by the DWARF loader, the encoder, the link and the tools.

Type ids are positions: ``Btf.types[0]`` stands for void, so a type's id is
its index.  Split BTF (modules) continues the ids and string offsets of its
base.  Members, parameters, enumerators and DATASEC entries are tuples so that
two types can be compared and hashed cheaply by ``BtfType.key()``.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count
from typing import Any, Final, NamedTuple, Protocol

from .kinds import (
    BITFIELD, KINDS, LINKAGE, SIGNED, UNION_FWD, Kind, info_of, ARRAY as _ARRAY,
    DATASEC as _DATASEC, FUNC_PROTO as _FUNC_PROTO, STRUCT as _STRUCT, UNION as _UNION,
)
from .strings import StringReader

#: Builds an entry from a tuple of its fields, skipping the namedtuple's
#: Python-level ``__new__`` (the readers and ``remap`` make many of them).
_new = tuple.__new__


@contextmanager
def gc_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector paused: it runs every few hundred
    new objects and then walks older ones too, so building a kernel's tens
    of thousands of types (which never form cycles) would pay for as many
    walks of everything already in memory; in a link, that was as much time
    again as the building itself."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Member(NamedTuple):
    name: str
    type: int
    bit_offset: int
    bitfield_size: int = 0


class Param(NamedTuple):
    name: str
    type: int


class Enumerator(NamedTuple):
    name: str
    value: int


class VarSecinfo(NamedTuple):
    type: int
    offset: int
    size: int


def _kflag_means(kind: Kind, meaning: str) -> bool:
    """Whether kind_flag means ``meaning`` for ``kind``."""
    return kind in _KFLAG_KINDS[meaning] or (kind not in _LINUX_KINDS
                                             and info_of(kind).kflag == meaning)


class BtfType:
    """One BTF type.  Which fields matter depends on ``kind``:

    INT: size, encoding, bit_offset, bits.  FLOAT: size.  PTR, TYPEDEF,
    CONST, VOLATILE, RESTRICT, TYPE_TAG: type.  ARRAY: type (element),
    index_type, nelems.  STRUCT/UNION: size, bitfields, items (Member).
    ENUM/ENUM64: size, signed, items (Enumerator).  FWD: fwd_union.
    FUNC: type (FUNC_PROTO), linkage.  FUNC_PROTO: type (return), items
    (Param; a last Param('', 0) marks varargs).  VAR: type, linkage.
    DATASEC: size, items (VarSecinfo).  DECL_TAG: type, component_idx.

    ``kflag`` is the format's kind_flag bit as it is; what it means depends
    on the kind (the registry's ``KindInfo.kflag``), and code that needs the
    meaning reads it through ``bitfields``, ``signed`` and ``fwd_union``.
    FUNC's linkage is the model's ``linkage``, whatever field holds it.
    """

    __slots__ = ('kind', 'name', 'size', 'type', 'kflag', 'encoding', 'bit_offset', 'bits',
                 'index_type', 'nelems', 'linkage', 'component_idx', 'items')

    def __init__(self, kind: Kind, name: str = '', size: int = 0, type: int = 0,
                 kflag: int = 0, encoding: int = 0, bit_offset: int = 0, bits: int = 0,
                 index_type: int = 0, nelems: int = 0, linkage: int = 0,
                 component_idx: int = -1, items: tuple = ()):
        self.kind = kind
        self.name = name
        self.size = size
        self.type = type
        self.kflag = kflag
        self.encoding = encoding
        self.bit_offset = bit_offset
        self.bits = bits
        self.index_type = index_type
        self.nelems = nelems
        self.linkage = linkage
        self.component_idx = component_idx
        self.items = items

    def __repr__(self) -> str:
        return f'BtfType({self.kind.name} {self.name!r} {self.key()[2:]})'

    def key(self) -> tuple:
        """Everything that makes this type what it is, as a hashable tuple."""
        return (self.kind, self.name, self.size, self.type, self.kflag,
                self.encoding, self.bit_offset, self.bits, self.index_type,
                self.nelems, self.linkage, self.component_idx, self.items)

    def refs(self) -> tuple[int, ...]:
        """The type ids this type refers to, in a fixed order."""
        k = self.kind
        if k in _ONE_REF:
            return (self.type,)
        if k is _ARRAY:
            return (self.type, self.index_type)
        if k is _FUNC_PROTO:
            return (self.type, *[p[1] for p in self.items])
        at = _ENTRY_TYPE.get(k)
        if at is not None:
            return tuple([e[at] for e in self.items])
        if k in _NO_REFS:
            return ()
        return self._refs_by_layout()

    def _refs_by_layout(self) -> tuple[int, ...]:
        """``refs`` of a kind only its registry entry describes."""
        info = info_of(self.kind)
        at = info.entry_type_at
        return (*[getattr(self, f) for f in info.refs],
                *([] if at is None else [e[at] for e in self.items]))

    def remap(self, f: Callable[[int], int]) -> None:
        """Replace every referenced type id ``i`` by ``f(i)`` in place."""
        k = self.kind
        if k in _ONE_REF:
            self.type = f(self.type)
        elif k is _ARRAY:
            self.type = f(self.type)
            self.index_type = f(self.index_type)
        elif k is _STRUCT or k is _UNION:
            self.items = tuple([_new(Member, (n, f(t), o, b)) for n, t, o, b in self.items])
        elif k is _FUNC_PROTO:
            self.type = f(self.type)
            self.items = tuple([_new(Param, (n, f(t))) for n, t in self.items])
        elif k is _DATASEC:
            self.items = tuple([_new(VarSecinfo, (f(t), o, s)) for t, o, s in self.items])
        elif k not in _NO_REFS:
            self._remap_by_layout(f)

    def _remap_by_layout(self, f: Callable[[int], int]) -> None:
        """``remap`` of a kind only its registry entry describes."""
        info = info_of(self.kind)
        for name in info.refs:
            setattr(self, name, f(getattr(self, name)))
        at = info.entry_type_at
        if at is not None:
            self.items = tuple([e.__class__(*e[:at], f(e[at]), *e[at + 1:]) for e in self.items])

    def copy(self) -> BtfType:
        return BtfType(*self.key())

    def __reduce__(self) -> tuple:
        # Pickled as its constructor's arguments (link -j workers send
        # types back): a compiled (mypyc) class has no other way.
        return BtfType, self.key()

    # kind_flag where it means one thing (False for other kinds, which
    # cannot set it), as plain properties: mypyc compiles no others.
    @property
    def bitfields(self) -> bool:
        """STRUCT/UNION: the member offsets carry bitfield sizes."""
        return bool(self.kflag) and _kflag_means(self.kind, BITFIELD)

    @bitfields.setter
    def bitfields(self, value: bool) -> None:
        self._set_kflag(BITFIELD, value)

    @property
    def signed(self) -> bool:
        """ENUM/ENUM64: the values are signed."""
        return bool(self.kflag) and _kflag_means(self.kind, SIGNED)

    @signed.setter
    def signed(self, value: bool) -> None:
        self._set_kflag(SIGNED, value)

    @property
    def fwd_union(self) -> bool:
        """FWD: declares a union, not a struct."""
        return bool(self.kflag) and _kflag_means(self.kind, UNION_FWD)

    @fwd_union.setter
    def fwd_union(self, value: bool) -> None:
        self._set_kflag(UNION_FWD, value)

    def _set_kflag(self, meaning: str, value: bool) -> None:
        if not _kflag_means(self.kind, meaning):
            raise AttributeError(f'kind_flag of {self.kind.name} does not mean {meaning}')
        self.kflag = int(value)

    @property
    def vlen(self) -> int:
        """What the format's vlen holds: the number of entries, or FUNC's linkage."""
        k = self.kind
        if k in _VLEN_IS_LINKAGE or (k not in _LINUX_KINDS and info_of(k).vlen == LINKAGE):
            return self.linkage
        return len(self.items)


_ONE_REF: Final = KINDS.one_ref
#: The kinds of KINDS whose kind_flag means each of these.
_KFLAG_KINDS: Final = {m: KINDS.kflag_means(m) for m in (BITFIELD, SIGNED, UNION_FWD)}
#: The kernel's kinds that refer to no type.
_NO_REFS: Final = frozenset(i.kind for i in KINDS if not i.refs and i.entry_type_at is None)
_VLEN_IS_LINKAGE: Final = KINDS.vlen_is_linkage
#: Where an entry of a STRUCT, UNION or DATASEC holds its type id
#: (FUNC_PROTO's parameters are read with its return type).
_ENTRY_TYPE: Final = {k: at for k, at in KINDS.entry_type_at.items() if k is not _FUNC_PROTO}
_SIZED: Final = KINDS.sized
#: The kinds ``KINDS`` describes: the sets above answer for them, a kind's
#: registry entry for the others.
_LINUX_KINDS: Final = frozenset(i.kind for i in KINDS)

VOID: Final = BtfType(Kind.UNKN)


def new_type(kind: Kind, name: str, size: int, type: int, kflag: int, encoding: int,
             bit_offset: int, bits: int, index_type: int, nelems: int, linkage: int,
             component_idx: int, items: tuple) -> BtfType:
    """``BtfType(...)`` for the C loaders (``_btf.h``'s ``new_type``).
    Compiled, this function takes its arguments as a vector and makes the
    type natively; calling the class from C packs them in a tuple and
    parses it as keywords, which cost more than making the type."""
    return BtfType(kind, name, size, type, kflag, encoding, bit_offset, bits, index_type,
                   nelems, linkage, component_idx, items)


#: What a type's header says: kind, name, size or type (an ARRAY's element
#: type), vlen, and what tells apart more types of those: an ARRAY's element
#: count, a FUNC_PROTO's parameter types (else 0).  Enough to index a base
#: table for dedup without parsing it.
Detail = int | tuple[int, ...]
Head = tuple[Kind, str, int, int, Detail]


def head(t: BtfType) -> Head:
    """The head of a parsed type (a lazy table reads it from the bytes)."""
    k = t.kind
    detail = (t.nelems if k is _ARRAY else tuple([p[1] for p in t.items]) if k is _FUNC_PROTO
              else 0)
    sized = k in _SIZED or (k not in _LINUX_KINDS and info_of(k).sized)
    return (k, t.name, t.size if sized else t.type, t.vlen, detail)


class TypeSource(Protocol):
    """Where a lazy table's types come from (the reader's scanned blob)."""

    def parse(self, index: int) -> BtfType:
        """The type at ``index`` of the table's ``types`` list."""

    def heads(self) -> list[Head]:
        """The heads of the table's own types, void excluded."""


class Btf:
    """A BTF type table, optionally split on top of a base.

    ``types[0]`` is the void placeholder of a base BTF.  For split BTF,
    ``types`` holds only the split part (no placeholder) and ids start at
    ``base.next_id``.  ``strings`` is the string section the table was read
    from, if it was read from bytes: split BTF on top of it resolves and
    reuses the base's names.

    A table read from bytes is lazy: a type is parsed when first looked up
    by id, and all of them at the first use of ``types``.  A module's link
    only meets a few of vmlinux's types.
    """
    __slots__ = ('_source', '_types', 'base', 'byteorder', 'strings')

    def __init__(self, types: list[BtfType] | None = None, base: Btf | None = None,
                 byteorder: str = 'little', strings: StringReader | None = None):
        if types is None:
            types = [] if base is not None else [VOID]
        elif base is not None and types and types[0] is VOID:
            types = types[1:]
        #: None where a lazy table has not parsed the type yet.
        self._types: list[Any] = types
        self._source: TypeSource | None = None
        self.base = base
        self.byteorder = byteorder
        self.strings = strings

    @classmethod
    def lazy(cls, count: int, source: TypeSource, base: Btf | None = None,
             byteorder: str = 'little', strings: StringReader | None = None) -> Btf:
        """A table of ``count`` own types, parsed from ``source`` when used."""
        btf = cls(base=base, byteorder=byteorder, strings=strings)
        btf._types += [None] * count
        btf._source = source
        return btf

    @property
    def types(self) -> list[BtfType]:
        if self._source is not None:
            types, parse = self._types, self._source.parse
            with gc_paused():
                for i, t in enumerate(types):
                    if t is None:
                        types[i] = parse(i)
            self._source = None
        return self._types

    @types.setter
    def types(self, types: list[BtfType]) -> None:
        self._types = types
        self._source = None

    @property
    def start_id(self) -> int:
        """Id of the first type this table itself holds (1 for a base)."""
        return self.base.next_id if self.base is not None else 1

    @property
    def next_id(self) -> int:
        """Id the next added type will get."""
        if self.base is None:
            return len(self._types)
        return self.base.next_id + len(self._types)

    def add(self, t: BtfType) -> int:
        self.types.append(t)
        return self.next_id - 1

    def __getitem__(self, type_id: int) -> BtfType:
        index = type_id
        if self.base is not None:
            first = self.base.next_id
            if type_id < first:
                return self.base[type_id]
            index -= first
        t = self._types[index]
        if t is None:
            assert self._source is not None     # only a lazy table holds None
            index %= len(self._types)
            t = self._types[index] = self._source.parse(index)
        return t

    def heads(self) -> list[Head]:
        """The head of each own type, void excluded; a lazy table reads
        those it has not parsed from its bytes."""
        own = self._types if self.base is not None else self._types[1:]
        if self._source is None:
            return [head(t) for t in own]
        return [h if t is None else head(t) for h, t in zip(self._source.heads(), own)]

    def own(self) -> Iterator[tuple[int, BtfType]]:
        """(id, type) for the types this table holds, void excluded."""
        return zip(count(self.start_id), self.types[0 if self.base is not None else 1:])

    def dangling(self) -> tuple[int, int] | None:
        """(id, reference) of the first own type that refers past the last
        type, or None: for the error of code that indexed past the table."""
        last = self.next_id - 1
        for type_id, t in self.own():
            refs = t.refs()
            if refs and max(refs) > last:
                return type_id, max(refs)
        return None

    def __len__(self) -> int:
        """Number of types this table holds, void excluded."""
        return len(self._types) - (0 if self.base is not None else 1)
