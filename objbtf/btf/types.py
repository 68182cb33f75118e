"""The in-memory BTF model shared by the DWARF loader, the encoder, the link and the tools.

Type ids are positions: ``Btf.types[0]`` stands for void, so a type's id is
its index.  Split BTF (modules) continues the ids and string offsets of its
base.  Members, parameters, enumerators and DATASEC entries are tuples so that
two types can be compared and hashed cheaply by ``BtfType.key()``.
"""
from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterator

from .kinds import Kind
from .strings import StringReader


class Member(namedtuple('Member', 'name type bit_offset bitfield_size', defaults=(0,))):
    __slots__ = ()


class Param(namedtuple('Param', 'name type')):
    __slots__ = ()


class Enumerator(namedtuple('Enumerator', 'name value')):
    __slots__ = ()


class VarSecinfo(namedtuple('VarSecinfo', 'type offset size')):
    __slots__ = ()


class BtfType:
    """One BTF type.  Which fields matter depends on ``kind``:

    INT: size, encoding, bit_offset, bits.  FLOAT: size.  PTR, TYPEDEF,
    CONST, VOLATILE, RESTRICT, TYPE_TAG: type.  ARRAY: type (element),
    index_type, nelems.  STRUCT/UNION: size, kflag, items (Member).
    ENUM/ENUM64: size, kflag (signed), items (Enumerator).  FWD: kflag (union).
    FUNC: type (FUNC_PROTO), linkage.  FUNC_PROTO: type (return), items
    (Param; a last Param('', 0) marks varargs).  VAR: type, linkage.
    DATASEC: size, items (VarSecinfo).  DECL_TAG: type, component_idx.
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

    def refs(self) -> Iterator[int]:
        """The type ids this type refers to, in a fixed order."""
        k = self.kind
        if k in _ONE_REF:
            yield self.type
        elif k is Kind.ARRAY:
            yield self.type
            yield self.index_type
        elif k in (Kind.STRUCT, Kind.UNION):
            for m in self.items:
                yield m.type
        elif k is Kind.FUNC_PROTO:
            yield self.type
            for p in self.items:
                yield p.type
        elif k is Kind.DATASEC:
            for v in self.items:
                yield v.type

    def remap(self, f: Callable[[int], int]) -> None:
        """Replace every referenced type id ``i`` by ``f(i)`` in place."""
        k = self.kind
        if k in _ONE_REF:
            self.type = f(self.type)
        elif k is Kind.ARRAY:
            self.type = f(self.type)
            self.index_type = f(self.index_type)
        elif k in (Kind.STRUCT, Kind.UNION):
            self.items = tuple(m._replace(type=f(m.type)) for m in self.items)
        elif k is Kind.FUNC_PROTO:
            self.type = f(self.type)
            self.items = tuple(Param(p.name, f(p.type)) for p in self.items)
        elif k is Kind.DATASEC:
            self.items = tuple(v._replace(type=f(v.type)) for v in self.items)

    def copy(self) -> BtfType:
        return BtfType(self.kind, self.name, self.size, self.type, self.kflag,
                       self.encoding, self.bit_offset, self.bits,
                       self.index_type, self.nelems, self.linkage,
                       self.component_idx, self.items)

    @property
    def vlen(self) -> int:
        if self.kind is Kind.FUNC:
            return self.linkage
        return len(self.items)


_ONE_REF = frozenset({Kind.PTR, Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST,
                      Kind.RESTRICT, Kind.FUNC, Kind.VAR, Kind.TYPE_TAG,
                      Kind.DECL_TAG})

VOID = BtfType(Kind.UNKN)


class Btf:
    """A BTF type table, optionally split on top of a base.

    ``types[0]`` is the void placeholder of a base BTF.  For split BTF,
    ``types`` holds only the split part (no placeholder) and ids start at
    ``base.next_id``.  ``strings`` is the string section the table was read
    from, if it was read from bytes: split BTF on top of it resolves and
    reuses the base's names.
    """
    __slots__ = ('types', 'base', 'byteorder', 'strings')

    def __init__(self, types: list[BtfType] | None = None, base: Btf | None = None,
                 byteorder: str = 'little', strings: StringReader | None = None):
        if types is None:
            types = [] if base is not None else [VOID]
        elif base is not None and types and types[0] is VOID:
            types = types[1:]
        self.types = types
        self.base = base
        self.byteorder = byteorder
        self.strings = strings

    @property
    def start_id(self) -> int:
        """Id of the first type this table itself holds (1 for a base)."""
        return self.base.next_id if self.base is not None else 1

    @property
    def next_id(self) -> int:
        """Id the next added type will get."""
        if self.base is None:
            return len(self.types)
        return self.base.next_id + len(self.types)

    def add(self, t: BtfType) -> int:
        self.types.append(t)
        return self.next_id - 1

    def __getitem__(self, type_id: int) -> BtfType:
        if self.base is not None:
            first = self.base.next_id
            if type_id < first:
                return self.base[type_id]
            return self.types[type_id - first]
        return self.types[type_id]

    def own(self) -> Iterator[tuple[int, BtfType]]:
        """(id, type) for the types this table holds, void excluded."""
        start = self.start_id
        offset = 0 if self.base is not None else 1
        for i, t in enumerate(self.types[offset:]):
            yield start + i, t

    def __len__(self) -> int:
        """Number of types this table holds, void excluded."""
        return len(self.types) - (0 if self.base is not None else 1)
