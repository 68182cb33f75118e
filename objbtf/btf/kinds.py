"""The BTF kind registry: what is true of each kind everywhere.

One ``KindInfo`` per kind (the kernel's uapi/linux/btf.h, libbpf's
``layouts[]``) says how the kind is laid out in the binary format and what
its fields mean; ``KINDS`` is the registry of the kinds the kernel knows.
The codec (``reader``, ``writer``), the model (``types``), dedup, hashing,
dump and the link ask it instead of keeping their own sets of kinds.  The
C extensions know ``KINDS`` from ``_btf.h`` (kind numbers, layouts, sets,
which words hold type ids and names), which tests/test_c_kinds.py checks
against this registry; ``in_c`` routes any other registry to Python.

Every type starts with the 12-byte ``struct btf_type`` (name offset, info,
size-or-type word), followed by ``fixed`` 32-bit words and ``vlen`` entries
of ``entry`` words.  Field names are the kernel's; a field called ``type``
holds a type id and one called ``name_off`` a string offset.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1
BTF_HEADER_LEN = 24
#: The header that also locates a kind layout section (``layout_off``,
#: ``layout_len``: Linux 7.x, libbpf 1.7, pahole's ``layout`` feature).
BTF_LAYOUT_HEADER_LEN = 32
#: Bytes of one kind's ``struct btf_layout``: info_sz, elem_sz (u8 each), flags (u16).
KIND_LAYOUT_LEN = 4
#: Bytes of ``struct btf_type``: name_off, info, size/type.
TYPE_HEAD_LEN = 12
#: Where the size-or-type word sits in ``struct btf_type``.
SIZE_TYPE_OFFSET = 8
MAX_NAME_LEN = 128
MAX_RESOLVE_DEPTH = 32
#: Kind numbers are 5 bits of ``info``.
MAX_KIND_NUMBER = 31


class Kind(IntEnum):
    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


#: Each kind as a module-level name: ``Kind.X`` costs a descriptor call each
#: time in CPython 3.11, and the reader, the writer and dedup compare kinds
#: in their hot loops (they import these as ``_X``).
(UNKN, INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT,
 FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64) = Kind

# INT encoding bits (BTF_INT_ENCODING).
INT_SIGNED = 1 << 0
INT_CHAR = 1 << 1
INT_BOOL = 1 << 2

# VAR linkage.
VAR_STATIC = 0
VAR_GLOBAL_ALLOCATED = 1
VAR_GLOBAL_EXTERN = 2

# FUNC linkage (the model's ``linkage``; the codec keeps it in vlen).
FUNC_STATIC = 0
FUNC_GLOBAL = 1
FUNC_EXTERN = 2

# What the size-or-type word of ``struct btf_type`` holds.
SIZE = 'size'       #: a byte size (the model's ``size``)
TYPE = 'type'       #: a type id or 0 (the model's ``type``)
ZERO = 'zero'       #: nothing; must be 0 (ARRAY keeps its types in its fixed part)

# What vlen (the low 16 bits of info) holds.
ENTRIES = 'entries'     #: the number of entries (the model's ``items``)
LINKAGE = 'linkage'     #: FUNC's linkage (the model's ``linkage``)

# What kind_flag (bit 31 of info) means, per kind (the model's named accessors).
BITFIELD = 'bitfield'   #: STRUCT/UNION: member offsets hold bitfield sizes
SIGNED = 'signed'       #: ENUM/ENUM64: values are signed
UNION_FWD = 'union'     #: FWD: of a union, not a struct
ATTRIBUTE = 'attribute'  #: DECL_TAG/TYPE_TAG: an __attribute__ tag (Linux 6.13)

# Families of kinds.
COMPOSITE = 'composite'
ENUMS = 'enums'

# The layouts of the words after ``struct btf_type`` (libbpf's names).
INT_DATA = ('int_data',)                      # encoding << 24 | offset << 16 | bits
BTF_ARRAY = ('type', 'index_type', 'nelems')
BTF_VAR = ('linkage',)
BTF_DECL_TAG = ('component_idx',)             # signed: -1 tags the type itself
BTF_MEMBER = ('name_off', 'type', 'offset')   # offset: bitfield_size << 24 | bits when kflag
BTF_ENUM = ('name_off', 'val')
BTF_ENUM64 = ('name_off', 'val_lo32', 'val_hi32')
BTF_PARAM = ('name_off', 'type')
BTF_VAR_SECINFO = ('type', 'offset', 'size')


@dataclass(frozen=True, eq=False)
class KindInfo:
    """Everything about one kind that holds everywhere.

    ``refs`` are the model fields that hold type ids besides the entries'
    ``type``, in the order ``BtfType.refs`` gives them.  ``leaf``: refers to
    no other type.  ``modifier``: transparent for size and resolution.
    ``named_entries`` is what messages call an entry's name.
    ``name_checked``: the kernel looks at the type's own name (not INT's
    and FLOAT's).  ``family`` groups kinds that are variants of one
    another (``COMPOSITE``: STRUCT and UNION; ``ENUMS``: ENUM and ENUM64).
    ``deduped``: dedup may merge two of them (not VAR and DATASEC, which
    place storage).
    """
    kind: Kind
    word: str
    fixed: tuple[str, ...] = ()
    entry: tuple[str, ...] = ()
    vlen: str | None = None
    kflag: str | None = None
    refs: tuple[str, ...] = ()
    leaf: bool = False
    modifier: bool = False
    named_entries: str = ''
    name_checked: bool = True
    family: str = ''
    deduped: bool = True
    # Derived in __post_init__.
    number: int = field(init=False)
    name: str = field(init=False)
    fixed_len: int = field(init=False)
    entry_len: int = field(init=False)
    entry_type_at: int | None = field(init=False)
    entry_name_at: int | None = field(init=False)

    def __post_init__(self) -> None:
        _INFOS[self.kind] = self
        put = object.__setattr__
        put(self, 'number', int(self.kind))
        put(self, 'name', self.kind.name)
        put(self, 'fixed_len', 4 * len(self.fixed))
        put(self, 'entry_len', 4 * len(self.entry))
        put(self, 'entry_type_at', self.entry.index('type') if 'type' in self.entry else None)
        put(self, 'entry_name_at',
            self.entry.index('name_off') if 'name_off' in self.entry else None)

    @property
    def sized(self) -> bool:
        """The size-or-type word is a size."""
        return self.word == SIZE

    @property
    def has_vlen(self) -> bool:
        """vlen may be non-zero."""
        return self.vlen is not None

    @property
    def one_ref(self) -> bool:
        """Refers to exactly one type, through its ``type``."""
        return self.refs == ('type',) and self.entry_type_at is None

    def extra_len(self, vlen: int) -> int:
        """Bytes that follow ``struct btf_type``."""
        return self.fixed_len + (self.entry_len * vlen if self.vlen == ENTRIES else 0)

    def entry_offset(self, index: int, entry_field: str) -> int:
        """Where ``entry_field`` of entry ``index`` sits, from the start of the type."""
        return (TYPE_HEAD_LEN + self.fixed_len + self.entry_len * index
                + 4 * self.entry.index(entry_field))


#: Every kind described so far, in any registry (``info_of``).
_INFOS: dict[Kind, KindInfo] = {}


def info_of(kind: Kind) -> KindInfo:
    """What is true of ``kind`` everywhere: for the model, which holds types
    of whatever registry they were read with."""
    return _INFOS[kind]


class KindRegistry:
    """The kinds a BTF table may hold, by number, with the sets each concern
    asks about.  Tests build registries with more kinds."""

    def __init__(self, infos: Iterable[KindInfo]):
        self.by_number: list[KindInfo | None] = [None] * (MAX_KIND_NUMBER + 1)
        for info in infos:
            if self.by_number[info.number] is not None:
                raise ValueError(f'two kinds numbered {info.number}')
            self.by_number[info.number] = info
        self.infos = [i for i in self.by_number if i is not None]
        self._by_kind = {i.kind: i for i in self.infos}

        def kinds(test) -> frozenset:
            return frozenset(i.kind for i in self.infos if test(i))
        self.sized = kinds(lambda i: i.sized)
        self.one_ref = kinds(lambda i: i.one_ref)
        self.leaf = kinds(lambda i: i.leaf)
        self.modifier = kinds(lambda i: i.modifier)
        self.has_vlen = kinds(lambda i: i.has_vlen)
        self.vlen_is_linkage = kinds(lambda i: i.vlen == LINKAGE)
        self.has_entries = kinds(lambda i: i.vlen == ENTRIES)
        #: kind -> which entry word holds a type id (kinds whose entries have one).
        self.entry_type_at = {i.kind: i.entry_type_at for i in self.infos
                              if i.entry_type_at is not None}
        self.not_deduped = kinds(lambda i: not i.deduped)
        self.composite = kinds(lambda i: i.family == COMPOSITE)
        self.enums = kinds(lambda i: i.family == ENUMS)
        #: libbpf's ``struct btf_layout`` of each kind number up to the
        #: highest known (0s for unknown numbers below it): the bytes after
        #: ``struct btf_type``, and of each of its vlen entries.
        self.layout = bytes(
            b for info in self.by_number[:self.infos[-1].number + 1]
            for b in ((info.fixed_len, info.entry_len if info.vlen == ENTRIES else 0, 0, 0)
                      if info is not None else (0, 0, 0, 0)))
        self.by_kflag: dict[str, frozenset] = {
            meaning: kinds(lambda i, m=meaning: i.kflag == m)
            for meaning in {i.kflag for i in self.infos if i.kflag}}

    def __getitem__(self, kind: Kind) -> KindInfo:
        return self._by_kind[kind]

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def __iter__(self):
        return iter(self.infos)

    def with_kinds(self, *infos: KindInfo) -> KindRegistry:
        """This registry with more kinds (a test's toy kinds)."""
        return KindRegistry([*self.infos, *infos])

    def kflag_means(self, meaning: str) -> frozenset:
        return self.by_kflag.get(meaning, frozenset())


#: The kinds of Linux 6.1 and later (BTF_KIND_UNKN .. BTF_KIND_ENUM64).
KINDS = KindRegistry([
    KindInfo(Kind.UNKN, TYPE),
    KindInfo(Kind.INT, SIZE, fixed=INT_DATA, leaf=True, name_checked=False),
    KindInfo(Kind.PTR, TYPE, refs=('type',)),
    KindInfo(Kind.ARRAY, ZERO, fixed=BTF_ARRAY, refs=('type', 'index_type')),
    KindInfo(Kind.STRUCT, SIZE, entry=BTF_MEMBER, vlen=ENTRIES, kflag=BITFIELD,
             named_entries='member name', family=COMPOSITE),
    KindInfo(Kind.UNION, SIZE, entry=BTF_MEMBER, vlen=ENTRIES, kflag=BITFIELD,
             named_entries='member name', family=COMPOSITE),
    KindInfo(Kind.ENUM, SIZE, entry=BTF_ENUM, vlen=ENTRIES, kflag=SIGNED, leaf=True,
             named_entries='value name', family=ENUMS),
    KindInfo(Kind.FWD, TYPE, kflag=UNION_FWD, leaf=True),
    KindInfo(Kind.TYPEDEF, TYPE, refs=('type',), modifier=True),
    KindInfo(Kind.VOLATILE, TYPE, refs=('type',), modifier=True),
    KindInfo(Kind.CONST, TYPE, refs=('type',), modifier=True),
    KindInfo(Kind.RESTRICT, TYPE, refs=('type',), modifier=True),
    KindInfo(Kind.FUNC, TYPE, vlen=LINKAGE, refs=('type',)),
    KindInfo(Kind.FUNC_PROTO, TYPE, entry=BTF_PARAM, vlen=ENTRIES, refs=('type',),
             named_entries='parameter name'),
    KindInfo(Kind.VAR, TYPE, fixed=BTF_VAR, refs=('type',), deduped=False),
    KindInfo(Kind.DATASEC, SIZE, entry=BTF_VAR_SECINFO, vlen=ENTRIES, deduped=False),
    KindInfo(Kind.FLOAT, SIZE, leaf=True, name_checked=False),
    KindInfo(Kind.DECL_TAG, TYPE, fixed=BTF_DECL_TAG, kflag=ATTRIBUTE, refs=('type',)),
    KindInfo(Kind.TYPE_TAG, TYPE, kflag=ATTRIBUTE, refs=('type',), modifier=True),
    KindInfo(Kind.ENUM64, SIZE, entry=BTF_ENUM64, vlen=ENTRIES, kflag=SIGNED, leaf=True,
             named_entries='value name', family=ENUMS),
])


def in_c(kinds: KindRegistry) -> bool:
    """Whether the C extensions may take a table of ``kinds``: they know the
    kernel's kinds, ``KINDS`` (``_btf.h``; tests/test_c_kinds.py ties the
    two), and no other registry's, whose tables the Python code takes."""
    return kinds is KINDS
