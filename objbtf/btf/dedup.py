"""BTF deduplication: the result of libbpf's ``btf__dedup`` on the same input.

The passes follow libbpf (src/btf.c), in its order:

1. strings: implicit, the model holds names as ``str`` and the writer lays
   out each referenced string once;
2. primitive types (INT, FLOAT, FWD, ENUM/ENUM64; an enum forward, vlen 0,
   matches a full enum of the same name, ENUM or ENUM64);
3. STRUCT/UNION (and, upstream, TYPEDEF): candidates share a shallow
   signature, a depth-first walk of both type graphs with a hypothetical
   map decides equivalence and resolves the FWDs it meets;
4. FWDs still unresolved go to the only struct/union of their name;
5. reference types, bottom-up, keyed by their canonical targets;
6. compaction (canonical types in id order) and remapping.

Candidates are found by signature (a tuple, or an interned shape id) instead
of libbpf's numeric hash, but visited in the order libbpf's hashmap visits
them (newest first, reversed at each growth of the table): when several
candidates match, the same one wins, and type ids come out as libbpf's.

Split BTF (a module on vmlinux): libbpf puts every base type in its table
first.  Here the base's types are only indexed by what their headers say
(``Btf.heads``, no parsing), and go into the table a group at a time, when
a lookup first needs that group, in the order libbpf's table would hold
them; a module's dedup then reads a few hundred of vmlinux's types, not
tens of thousands.

``libbpf_1_1=True`` reproduces libbpf 1.1 (Debian 12; pahole 1.24 uses it)
rather than upstream libbpf: TYPEDEFs are deduplicated with the reference
types, and when one graph walk meets a canonical type twice, the two
candidate types must be arrays with equal ids, or structs made of those,
rather than structurally identical down to 16 levels.  Upstream compares an
array's element types in that check with themselves (``a2 =
btf_array(t1)``); here the two arrays' element types are compared.
"""
from __future__ import annotations

import functools
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import compress
from operator import itemgetter, ne
from typing import Final, Protocol, cast

from .. import c_extension
from .errors import BtfError
from .header import BtfHeader
from .kinds import (
    KINDS, MAX_KIND_NUMBER, Kind, KindRegistry, ARRAY as _ARRAY, DECL_TAG as _DECL_TAG,
    ENUM as _ENUM, FLOAT as _FLOAT, FUNC_PROTO as _FUNC_PROTO, FWD as _FWD, INT as _INT,
    STRUCT as _STRUCT, TYPEDEF as _TYPEDEF, UNION as _UNION, UNKN as _UNKN, in_c,
)
from .types import VOID, Btf, BtfType, Head, Param, gc_paused, head

_UNPROCESSED = -1
_IN_PROGRESS = -2
_IDENTICAL_DEPTH = 16
_new = tuple.__new__

Key = object
Resolve = Callable[[int], int]
#: A member's name, bit offset and bitfield size; a parameter's name.
_MEMBER_SHAPE = itemgetter(0, 2, 3)
_PARAM_NAME = itemgetter(0)
#: objbtf.btf._blob and _dedup, when the compiled build runs.
_C_BLOB: Final = c_extension('objbtf.btf._blob')
_C_DEDUP: Final = c_extension('objbtf.btf._dedup')
_HOST_BIG: Final = sys.byteorder == 'big'


def dedup(btf: Btf, *, libbpf_1_1: bool = False, split_base: SplitBase | None = None,
          kinds: KindRegistry = KINDS, consume: bool = False) -> Btf:
    """A new, deduplicated copy of ``btf`` (split BTF stays on its base).
    ``split_base`` says what the dedup needs of the base, when something
    holds it already (else it is read from the base's heads).  ``kinds``
    is the registry of the kinds ``btf`` holds.  With ``consume``, the
    caller is done with ``btf``: its type objects (each must be in it
    once) become the output's, changed in place, instead of being copied."""
    with gc_paused():
        if not libbpf_1_1 and btf.base is None and in_c(kinds):
            m = _map_in_c(btf)
            if m is not None:
                return _compact(btf, cast('list[BtfType | None]', btf.types), m, consume)
        # The passes' state is freed before the collector comes back: it
        # would walk all of it once.
        return _Dedup(btf, libbpf_1_1, split_base, kinds).run(consume)


def _map_in_c(btf: Btf) -> list[int] | None:
    """The passes' map of base BTF ``btf`` (the kernel's kinds, upstream
    libbpf) from their C code (``_dedup.c``), run on its blob; None
    without the compiled build, or where the C code leaves the model to
    the passes below."""
    written = _written(btf)
    if written is None:
        return None
    m: list[int] | None = _C_DEDUP.map(written[0])
    return m


def dedup_blob(btf: Btf) -> tuple[bytes, list[int], list[int]] | None:
    """``encode_btf(dedup(btf), offsets)``, the offsets, and the positions
    of its DATASECs among its types, for base BTF of the kernel's kinds,
    made in C (``_dedup.c``) from the blob of ``btf`` without a model of
    the result: what the encoder needs.  None without the compiled build,
    or where the C code leaves it to ``dedup`` and the writer (which then
    raise wherever it is wrong).  Upstream libbpf's rules, as ``dedup``'s
    default."""
    written = _written(btf)
    if written is None:
        return None
    order = btf.byteorder
    made = _C_DEDUP.blob(written[0], written[1], order == 'big')
    if made is None:
        return None
    section, strings, starts, datasecs = made
    header = BtfHeader.for_sections(order, len(section), len(strings)).pack()
    return header + section + strings, starts, datasecs


def _written(btf: Btf) -> tuple[bytes, bytes] | None:
    """What the C passes read: the blob's sections of base BTF ``btf``,
    in the host's byte order, written only if they read back as ``btf``
    (``_blob.write``'s strict mode); None without the compiled build."""
    if _C_DEDUP is None or _C_BLOB is None or btf.base is not None:
        return None
    written: tuple[bytes, bytes] | None = _C_BLOB.write(btf.types, _HOST_BIG, True)
    return written


# -- the kinds, as dedup sees them ---------------------------------------------

class _Classes:
    """What dedup asks about kinds, derived once from a registry.

    libbpf treats a few kinds one by one (INT, FLOAT, FWD, TYPEDEF, ARRAY,
    FUNC_PROTO, DECL_TAG) and two families (STRUCT/UNION, ENUM/ENUM64);
    the registry says which kinds belong to the families, and places every
    other kind by its entry: a leaf is a primitive type, compared by all its
    fields; a kind that is its header and one target is a chain, which a
    graph walk follows; any other kind that refers to types is compared by
    all its fields but the ids, then by its targets (``by_layout``).
    """

    def __init__(self, kinds: KindRegistry) -> None:
        self.kinds = kinds
        deduped = [i for i in kinds if i.deduped]
        self.enums = kinds.enums
        self.composite = kinds.composite
        self.never_deduped = kinds.not_deduped
        self.primitive = kinds.leaf
        #: Reference kinds that are their header and one target: a graph
        #: walk follows ``type`` once the headers agree.
        self.chain = frozenset(i.kind for i in deduped if i.one_ref and not i.fixed)
        refers = frozenset(i.kind for i in deduped if i.refs or i.entry_type_at is not None)
        #: Kinds a structural comparison descends into: more than one target.
        self.graph = frozenset(i.kind for i in deduped
                               if i.kind in refers and not i.one_ref)
        #: Kinds libbpf has no rule of its own for.
        leaves = self.primitive - self.enums - {_INT, _FLOAT, _FWD}
        self.by_layout = leaves | (refers - self.chain - self.composite
                                   - {_ARRAY, _FUNC_PROTO, _DECL_TAG})
        #: Kinds the base's groups (``coarse_of_head``) tell apart by kind
        #: and name alone.
        self.by_name = self.by_layout | {_FWD, _TYPEDEF}
        self.coarse_of_head = self._coarse_getters(kinds)
        self.shape = self._shape_function()
        self.children = self._children_function()

    def _coarse_getters(self, kinds: KindRegistry) -> list[Callable[[Head], object] | None]:
        """Per kind number, what groups a base type for ``_BaseCandidates``
        (None: never in the table): an enum's name alone (all its key has;
        the enums match each other); kind and name, and the size and member
        count of what has a size, the targets of a reference, an array's
        element count.  Head fields: kind, name, size or type, vlen, detail."""
        getters: list[Callable[[Head], object] | None] = [None] * (MAX_KIND_NUMBER + 1)
        for info in kinds:
            k = info.kind
            if k in self.never_deduped or k is _UNKN:
                continue
            if k in self.enums:
                getters[k] = itemgetter(1)
            elif k in self.by_name:
                getters[k] = itemgetter(0, 1)
            elif k in self.composite:
                getters[k] = itemgetter(0, 1, 2, 3)
            elif k is _ARRAY or k is _FUNC_PROTO:
                getters[k] = itemgetter(0, 1, 2, 4)
            else:                       # INT and FLOAT: the size; the others: the target
                getters[k] = itemgetter(0, 1, 2)
        return getters

    def _shape_function(self) -> Callable[[BtfType], tuple]:
        composite, chain, enums, by_layout = self.composite, self.chain, self.enums, self.by_layout

        def shape(t: BtfType) -> tuple:
            """All a graph walk compares of ``t`` but the ids it refers to."""
            k = t.kind
            if k in composite:
                return (k, t.name, t.kflag, t.size, tuple(map(_MEMBER_SHAPE, t.items)))
            if k in chain:
                return (k, t.name, t.kflag, t.linkage)
            if k is _ARRAY:
                return (k, t.name, t.kflag, t.nelems)
            if k is _FUNC_PROTO:
                return (k, t.name, t.kflag, tuple(map(_PARAM_NAME, t.items)))
            if k is _INT:
                return (k, t.name, t.kflag, t.size, t.encoding, t.bit_offset, t.bits)
            if k is _FLOAT:
                return (k, t.name, t.kflag, t.size)
            if k is _FWD:
                return (k, t.name, t.kflag, t.type)
            if k in enums:
                return (k, t.name, t.kflag, t.size, t.items)
            if k in by_layout:
                return (k, t.name, _without_ids(t))
            return (k, t.name)
        return shape

    def _children_function(self) -> Callable[[BtfType], tuple[int, ...]]:
        walked = (self.chain | self.composite | self.primitive | (self.by_layout & self.graph)
                  | {_FUNC_PROTO})

        def children(t: BtfType) -> tuple[int, ...]:
            """Referenced ids (``BtfType.refs``), in the order a graph walk
            compares them: an array's index type before its element (libbpf's)."""
            k = t.kind
            if k is _ARRAY:
                return (t.index_type, t.type)
            if k in walked:
                return t.refs()
            raise BtfError(f'a struct or union graph reaches a {k.name}')
        return children


@functools.cache
def _classes(kinds: KindRegistry) -> _Classes:
    return _Classes(kinds)


def _without_ids(t: BtfType) -> tuple:
    """Everything that makes ``t`` what it is but the ids it refers to."""
    c = t.copy()
    c.remap(_zero)
    return c.key()


def _zero(_type_id: int) -> int:
    return 0


def _identity(type_id: int) -> int:
    return type_id


def _enum_fwd_match(a: BtfType, b: BtfType) -> bool:
    """Two enums of one name, at least one a forward (vlen 0)."""
    return a.name == b.name and not (a.items and b.items)


def _fwd_kind(t: BtfType) -> Kind:
    return _UNION if t.fwd_union else _STRUCT


def _all_heads(btf: Btf) -> list[Head]:
    """The head of every type by id: those of the bases, void first, then btf's own."""
    below = _all_heads(btf.base) if btf.base is not None else [head(VOID)]
    return below + btf.heads()


# -- the candidate table ----------------------------------------------------------

class _Several:
    """The ids of a key with more than one, and the table's growth count
    when they were last put in the order its hashmap yields them."""
    __slots__ = ('stamp', 'ids')

    def __init__(self, stamp: int, ids: list[int]) -> None:
        self.stamp = stamp
        self.ids = ids


class _Candidates:
    """libbpf's dedup table: canonical ids per key, in the order its hashmap
    yields them.  The hashmap pushes an entry at the head of its bucket and
    rehashes by walking each bucket, which reverses the entries of one key
    whenever it grows; each ``_Several`` remembers how many growths it saw.
    A key with one id (most of them) holds just that id."""

    def __init__(self) -> None:
        self._entries: dict[Key, int | _Several] = {}
        self._size = 0
        self._cap = 0
        self._grows = 0

    def get(self, key: Key) -> Sequence[int]:
        entry = self._entries.get(key)
        if entry is None:
            return ()
        if isinstance(entry, int):
            return (entry,)
        return self._ordered(entry)

    def _ordered(self, entry: _Several) -> list[int]:
        """``entry``'s ids in the order the hashmap yields them now."""
        if (self._grows - entry.stamp) & 1:
            entry.ids.reverse()
        entry.stamp = self._grows
        return entry.ids

    def first_or_add(self, key: Key, type_id: int) -> int:
        """The first candidate of ``key``, or ``type_id`` once added when
        there is none (one dict lookup for what most types need)."""
        entry = self._entries.setdefault(key, type_id)
        if not isinstance(entry, int):
            return self._ordered(entry)[0]
        if entry == type_id:
            size = self._size = self._size + 1           # _count_add, inline
            if size * 4 // 3 > self._cap:
                self._cap = max(4, self._cap * 2)
                self._grows += 1
        return entry

    def add(self, key: Key, type_id: int) -> None:
        self._count_add()
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = type_id
        elif isinstance(entry, int):
            self._entries[key] = _Several(self._grows, [type_id, entry])
        else:
            self._ordered(entry).insert(0, type_id)

    def _count_add(self) -> None:
        size = self._size = self._size + 1
        if size * 4 // 3 > self._cap:
            self._cap = max(4, self._cap * 2)
            self._grows += 1


def _growth_points(adds: int) -> list[int]:
    """The adds (counted from 1) at which ``_Candidates`` grows, up to ``adds``."""
    points: list[int] = []
    cap = n = 0
    while True:
        n = max(n + 1, -(-3 * (cap + 1) // 4))      # the first n with n * 4 // 3 > cap
        if n > adds:
            return points
        points.append(n)
        cap = max(4, cap * 2)


class BaseGroups(Protocol):
    """The base types of a split dedup grouped by ``_Classes.coarse_of_head``: what
    ``_BaseCandidates`` loads a group at a time.  ``HeadGroups`` computes
    them from the base's heads; a persistent index of the base can hold
    them instead (``linkdedup/base_index.py``)."""

    @property
    def size(self) -> int:
        """How many base types the table holds (all but void, VARs, DATASECs)."""

    @property
    def skipped(self) -> Sequence[int]:
        """The base ids never in the table, sorted."""

    def take(self, coarse: object) -> list[int] | None:
        """The ids of group ``coarse``, in id order, the first time it is
        asked for; None after that, or when there is no such group."""


class HeadGroups:
    """``BaseGroups`` from the head of every base type."""

    def __init__(self, heads: list[Head], kinds: KindRegistry = KINDS) -> None:
        # A group is its first id, and a list of all of them when it has more.
        self._firsts: dict[object, int] = {}
        self._more: dict[object, list[int]] = {}
        self.skipped: list[int] = []
        firsts, more, getters = self._firsts, self._more, _classes(kinds).coarse_of_head
        for i in range(1, len(heads)):
            h = heads[i]
            getter = getters[h[0]]
            if getter is None:
                self.skipped.append(i)
                continue
            coarse = getter(h)
            first = firsts.setdefault(coarse, i)
            if first != i:
                more.setdefault(coarse, [first]).append(i)
        self.size = len(heads) - 1 - len(self.skipped)

    def take(self, coarse: object) -> list[int] | None:
        first = self._firsts.pop(coarse, None)
        if first is None:
            return None
        return self._more.pop(coarse, None) or [first]

    def items(self) -> Iterator[tuple[object, list[int]]]:
        """Every group not taken yet: (coarse key, ids)."""
        for coarse, first in self._firsts.items():
            yield coarse, self._more.get(coarse) or [first]


class _BaseCandidates(_Candidates):
    """The table of a split dedup, as if every base type (but VARs and
    DATASECs) had been added first, in id order, as libbpf does.

    The base types are grouped by a coarse key that their heads give
    (``_Classes.coarse_of_head``) and that the table key of any type equal to them
    gives too (``_Dedup._coarse_of_key``).  A group goes into the table when
    a key of it is first looked up: its types are parsed then, and each
    key's ids put in the order the adds and growths before would have left
    them.
    """

    def __init__(self, groups: BaseGroups, key_of: Callable[[int], Key],
                 coarse_of_key: Callable[[Key], object]) -> None:
        super().__init__()
        self._key_of = key_of
        self._coarse_of_key = coarse_of_key
        self._groups = groups
        self._skipped = groups.skipped
        self._size = groups.size
        self._points = _growth_points(self._size)
        self._grows = len(self._points)
        self._cap = 4 << (self._grows - 1) if self._grows else 0

    def get(self, key: Key) -> Sequence[int]:
        self._load(key)
        return super().get(key)

    def first_or_add(self, key: Key, type_id: int) -> int:
        self._load(key)
        return super().first_or_add(key, type_id)

    def add(self, key: Key, type_id: int) -> None:
        self._load(key)
        super().add(key, type_id)

    def _load(self, key: Key) -> None:
        ids = self._groups.take(self._coarse_of_key(key))
        if ids is not None:
            self._load_group(ids)

    def _load_group(self, ids: list[int]) -> None:
        by_key: dict[Key, list[int]] = {}
        for i in ids:
            by_key.setdefault(self._key_of(i), []).append(i)
        for key, same in by_key.items():
            if len(same) == 1:
                self._entries[key] = same[0]
                continue
            order: list[int] = []
            stamp = 0
            for i in same:
                grows = bisect_right(self._points, i - bisect_left(self._skipped, i))
                if (grows - stamp) & 1:
                    order.reverse()
                stamp = grows
                order.insert(0, i)
            self._entries[key] = _Several(stamp, order)


class SplitBase(Protocol):
    """What a split dedup needs of its base, besides its types: the kind of
    every base id, the base's types grouped for the candidate table, and
    its structs and unions by name.  ``HeadsBase`` reads them from the
    base's heads; ``linkdedup/base_index.py`` from a persistent index."""

    def kinds(self) -> list[Kind]:
        """The kind of every base id, void first."""

    def groups(self) -> BaseGroups:
        """The base types grouped for ``_BaseCandidates``."""

    def composite(self, name: str) -> int | None:
        """The one struct or union of the base named ``name``; 0 when there
        are several, None when there is none."""


class HeadsBase:
    """``SplitBase`` from the head of every base type (``Btf.heads``);
    ``kinds`` is the registry of the kinds the base holds."""

    def __init__(self, base: Btf, kinds: KindRegistry = KINDS) -> None:
        self.heads = _all_heads(base)
        self._registry = kinds
        self._composites: dict[str, int] | None = None

    def kinds(self) -> list[Kind]:
        return [h[0] for h in self.heads]

    def groups(self) -> HeadGroups:
        return HeadGroups(self.heads, self._registry)

    def composite(self, name: str) -> int | None:
        if self._composites is None:
            self._composites = {}
            composite = self._registry.composite
            for i, h in enumerate(self.heads):
                if h[0] in composite:
                    self._composites[h[1]] = 0 if h[1] in self._composites else i
        return self._composites.get(name)


# -- the passes -------------------------------------------------------------------

#: The base kinds a split dedup last found free of kind 0, and ids in order
#: (``_id_list``): a resident worker links module after module on one base
#: index, and scanning or numbering vmlinux's 42 k ids anew, each time the
#: map is made and compacted, took a few milliseconds a link.
_checked_base_kinds: list[Kind] | None = None
_kept_ids: list[int] = []


def _id_list(n: int) -> list[int]:
    """``list(range(n))``, copied from a list kept for the next call."""
    global _kept_ids
    if len(_kept_ids) < n:
        _kept_ids = list(range(n))
    return _kept_ids[:n]


class _Dedup:
    """State shared by the passes.  ``map`` sends each id towards its
    canonical id (libbpf's ``d->map``, negative while unprocessed);
    ``hypot`` maps canonical to candidate ids during one graph walk."""

    def __init__(self, btf: Btf, libbpf_1_1: bool, split_base: SplitBase | None,
                 kinds: KindRegistry = KINDS) -> None:
        self.btf = btf
        self.legacy = libbpf_1_1
        self.start = start = btf.start_id
        own = btf.types
        # The kind classes, looked up here once rather than per type.
        self.classes = c = _classes(kinds)
        self.enum_kinds, self.composite, self.chain = c.enums, c.composite, c.chain
        self.by_layout = c.by_layout
        self.shape, self.children_of = c.shape, c.children
        #: Kinds whose table key is their shape.
        self.shaped = c.primitive | c.composite | (set() if libbpf_1_1 else {_TYPEDEF})
        self.shape_ids: dict[tuple, int] = {}
        self.shapes: list[tuple] = []
        if btf.base is None:
            self.types: list[BtfType | None] = cast('list[BtfType | None]', own)
            self.kinds = [t.kind for t in own]
        else:
            self.types = [None] * start + own
            self.base: SplitBase = split_base or HeadsBase(btf.base, c.kinds)
            base_kinds = self.base.kinds()
            self.kinds = base_kinds + [t.kind for t in own]
        n = len(self.types)
        own_ids = enumerate(own if btf.base is not None else own[1:], start)
        never = c.never_deduped
        self.map = _id_list(start) + [i if t.kind in never else _UNPROCESSED
                                       for i, t in own_ids]
        self.hypot: dict[int, int] = {}
        self.adjust_canon = False
        self.enums: dict[Key, list] = {}          # see _enum_candidates
        self.sids = [-1] * n
        self.children: list[tuple[int, ...] | None] = [None] * n
        self.table: _Candidates
        if btf.base is None:
            self.table = _Candidates()
        else:
            self._check_base_kinds(base_kinds)
            self.table = _BaseCandidates(self.base.groups(), self._base_key, self._coarse_of_key)

    # -- helpers ----------------------------------------------------------

    def type(self, i: int) -> BtfType:
        """Type ``i``; a base type is fetched (parsed) on first use."""
        t = self.types[i]
        if t is None:
            t = self.types[i] = self.btf[i]
        return t

    def resolve(self, i: int) -> int:
        """Follow ``map`` to the current canonical id (or an unmapped id)."""
        return _resolve(self.map, i)

    def sid(self, i: int) -> int:
        """Shape id: equal for types of equal ``shape``."""
        s = self.sids[i]
        if s < 0:
            shape = self.shape(self.type(i))
            known = self.shape_ids.get(shape)
            if known is None:
                known = self.shape_ids[shape] = len(self.shapes)
                self.shapes.append(shape)
            s = self.sids[i] = known
        return s

    def kids(self, i: int) -> tuple[int, ...]:
        c = self.children[i]
        if c is None:
            c = self.children[i] = self.children_of(self.type(i))
        return c

    def key(self, i: int, ref: Resolve) -> Key:
        """Table key: shape for what graph walks compare, the name for an
        enum (forwards match full enums), else header and targets."""
        k = self.kinds[i]
        if k in self.enum_kinds:
            return (_ENUM, self.type(i).name)
        if k in self.shaped:
            return self.sid(i)
        return self._ref_key(self.type(i), ref)

    def _ref_key(self, t: BtfType, ref: Resolve) -> Key:
        """Table key of a reference type: header and canonical targets.
        ``ref`` gives those that are not canonical themselves, called in
        libbpf's order (element before index)."""
        m = self.map
        k = t.kind
        if k in self.chain:
            x = t.type
            return (k, t.name, t.kflag, t.linkage, x if m[x] == x else ref(x))
        if k is _FUNC_PROTO:
            x = t.type
            ret = x if m[x] == x else ref(x)
            return (k, t.name, t.kflag, ret,
                    tuple([(n, x if m[x] == x else ref(x)) for n, x in t.items]))
        if k is _ARRAY:
            x = t.type
            elem = x if m[x] == x else ref(x)
            x = t.index_type
            return (k, t.name, t.kflag, t.nelems, elem, x if m[x] == x else ref(x))
        if k is _DECL_TAG:
            x = t.type
            return (k, t.name, t.kflag, t.component_idx, x if m[x] == x else ref(x))
        if k in self.by_layout:
            return (k, t.name, _without_ids(t),
                    tuple([x if m[x] == x else ref(x) for x in t.refs()]))
        raise BtfError(f'cannot deduplicate a type of kind {k.name}')

    def _base_key(self, i: int) -> Key:
        """Table key of base type ``i``: its targets are canonical already."""
        return self.key(i, _identity)

    def _coarse_of_key(self, key: Key) -> object:
        """How ``coarse_of_head`` groups the base types of table key ``key``."""
        by_name = self.classes.by_name
        if isinstance(key, int):
            shape = self.shapes[key]
            k = shape[0]
            if k in by_name:
                return (k, shape[1])
            if k in self.composite:
                return (k, shape[1], shape[3], len(shape[4]))
            return (k, shape[1], shape[3])          # INT, FLOAT: the size
        assert isinstance(key, tuple)
        k = key[0]
        if k is _ENUM:
            return key[1]
        if k in by_name:                            # TYPEDEF (libbpf 1.1), kinds by layout
            return key[:2]
        if k is _ARRAY:
            return (k, key[1], key[4], key[3])
        if k is _FUNC_PROTO:
            return (k, key[1], key[3], tuple([p[1] for p in key[4]]))
        return (k, key[1], key[-1])

    def _check_base_kinds(self, base_kinds: list[Kind]) -> None:
        """libbpf refuses a base type it cannot hash (kind 0, but void); the
        base's keys are only computed when needed, so look for one now.  A
        base index gives the same list link after link: checked once."""
        global _checked_base_kinds
        if base_kinds is _checked_base_kinds:
            return
        if _UNKN in base_kinds[1:]:
            self._base_key(base_kinds.index(_UNKN, 1))        # raises
        _checked_base_kinds = base_kinds

    def _set_canonical(self, key: Key, type_id: int, new_id: int) -> None:
        self.map[type_id] = new_id
        if new_id == type_id:
            self.table.add(key, type_id)

    # -- passes -----------------------------------------------------------

    def run(self, consume: bool) -> Btf:
        self.prim_types()
        self.struct_types()
        self.resolve_fwds()
        self.ref_types()
        out = self.compact(consume)
        # A split table's lookups refer back to this object: without that
        # cycle, refcounting frees all of the state at once.
        self.table = _Candidates()
        return out

    def prim_types(self) -> None:
        kinds, sid, table = self.kinds, self.sid, self.table
        enums, primitive = self.enum_kinds, self.classes.primitive
        for i in range(self.start, len(kinds)):
            k = kinds[i]
            if k in enums:
                self._prim_enum(i)
            elif k in primitive:
                self.map[i] = table.first_or_add(sid(i), i)

    def _prim_enum(self, i: int) -> None:
        """An enum goes to the first candidate of its name that has its
        shape or, being a forward, to the first one of its name; a full enum
        takes over the canonical forwards it meets before."""
        t = self.types[i]
        assert t is not None
        key = (_ENUM, t.name)
        sid = self.sid
        s = sid(i)
        shapes, forwards = seen = self._enum_candidates(key)
        new_id = i
        if forwards or not t.items or s in shapes:        # else none can match
            for c in self.table.get(key):
                if sid(c) == s or not t.items:
                    new_id = c
                    break
                if not self.type(c).items:
                    self.map[c] = i      # a canonical enum forward goes to t
        self._set_canonical(key, i, new_id)
        if new_id == i:
            shapes.add(s)
            seen[1] = forwards or not t.items

    def _enum_candidates(self, key: Key) -> list:
        """[shape ids, whether one is a forward] of the candidates of an enum
        key: anonymous enums all share one, and most look for nothing in it."""
        seen = self.enums.get(key)
        if seen is None:
            candidates = self.table.get(key)
            seen = self.enums[key] = [{self.sid(c) for c in candidates},
                                      any(not self.type(c).items for c in candidates)]
        return seen

    def struct_types(self) -> None:
        kinds, m, sids, table = self.kinds, self.map, self.sids, self.table
        walked = self.composite if self.legacy else self.composite | {_TYPEDEF}
        for i in range(self.start, len(kinds)):
            if kinds[i] in walked and m[i] < 0:
                key = sids[i]
                if key < 0:
                    key = self.sid(i)
                candidates = table.get(key)
                if candidates:
                    self._struct_type(i, key, candidates)
                else:                           # what most are: the first of their shape
                    m[i] = i
                    table.add(key, i)

    def _struct_type(self, i: int, key: Key, candidates: Sequence[int]) -> None:
        new_id = i
        for c in candidates:
            self.hypot.clear()
            self.adjust_canon = False
            if not self.is_equiv(i, c):
                continue
            self._merge_hypot()
            if not self.adjust_canon:
                new_id = c
                break
        self._set_canonical(key, i, new_id)

    def is_equiv(self, cand_id: int, canon_id: int) -> bool:
        """Whether the graphs from ``cand_id`` and ``canon_id`` are the same
        type: libbpf's btf_dedup_is_equiv, a depth-first walk of both that
        records in ``hypot`` which candidate type each canonical one met."""
        m, kinds, hypot = self.map, self.kinds, self.hypot
        sids, children = self.sids, self.children
        stack = [(cand_id, canon_id)]
        pop, push = stack.pop, stack.extend
        while stack:
            cand, canon = pop()
            a = cand
            j = m[a]
            while j >= 0 and j != a:
                a = j
                j = m[a]
            b = canon
            j = m[b]
            while j >= 0 and j != b:
                b = j
                j = m[b]
            if a == b:
                continue                  # already known to be one type
            if b != canon and kinds[canon] is _FWD and kinds[b] is not _FWD:
                canon = b                 # a FWD already resolved
            seen = hypot.get(canon)
            if seen is not None:
                if seen == cand or self._identical(seen, cand):
                    continue
                return False
            hypot[canon] = cand
            sa = sids[cand]
            if sa < 0:
                sa = self.sid(cand)
            sb = sids[canon]
            if sb < 0:
                sb = self.sid(canon)
            if sa != sb:
                if self._compatible(cand, canon):
                    continue
                return False
            ca = children[cand]
            if ca is None:
                ca = self.kids(cand)
            if ca:
                cb = children[canon]
                if cb is None:
                    cb = self.kids(canon)
                push(zip(reversed(ca), reversed(cb)))
        return True

    def _compatible(self, cand: int, canon: int) -> bool:
        """Two types of different shapes that are still equivalent: a FWD
        and a struct/union of its name and kind, or an enum forward."""
        a, b = self.type(cand), self.type(canon)
        if a.name != b.name:
            return False
        ka, kb = a.kind, b.kind
        if ka is _FWD and kb is not _FWD:
            return _fwd_kind(a) is kb
        if kb is _FWD and ka is not _FWD:
            if _fwd_kind(b) is not ka:
                return False
            if canon < self.start:
                self.adjust_canon = True     # would resolve a base FWD
            return True
        return ka is kb and ka in self.enum_kinds and _enum_fwd_match(a, b)

    def _identical(self, id1: int, id2: int) -> bool:
        """Whether the two candidate types one canonical type met are the
        same (a compiler may emit a type twice in one unit)."""
        if self.legacy:
            return self._identical_arrays(id1, id2) or self._identical_structs(id1, id2)
        return self._identical_types(id1, id2, _IDENTICAL_DEPTH)

    def _identical_types(self, id1: int, id2: int, depth: int) -> bool:
        """Structurally the same type, looking ``depth`` levels deep.  A
        chain of modifiers longer than the table is a loop (damaged
        input), where libbpf's walk would never end: not the same."""
        kinds, sid, c = self.kinds, self.sid, self.classes
        steps = 0
        while kinds[id1] in c.chain and sid(id1) == sid(id2):
            id1, id2 = self.type(id1).type, self.type(id2).type
            steps += 1
            if steps > len(kinds):
                return False
        k = kinds[id1]
        if depth <= 0 or k is not kinds[id2]:
            return False
        if k is _UNKN:
            return True
        if k in c.enums:
            return sid(id1) == sid(id2) or _enum_fwd_match(self.type(id1), self.type(id2))
        if k not in c.primitive and k not in c.graph:
            return False
        return sid(id1) == sid(id2) and all(
            x == y or self._identical_types(x, y, depth - 1)
            for x, y in zip(self.kids(id1), self.kids(id2)))

    def _identical_arrays(self, id1: int, id2: int) -> bool:
        """libbpf 1.1: two ARRAYs equal down to the ids they refer to."""
        return (self.kinds[id1] is _ARRAY and self.kinds[id2] is _ARRAY
                and self.sid(id1) == self.sid(id2) and self.kids(id1) == self.kids(id2))

    def _identical_structs(self, id1: int, id2: int) -> bool:
        """libbpf 1.1: two structs (unions) whose members are the same ids,
        identical arrays or identical structs."""
        if self.kinds[id1] not in self.composite or self.sid(id1) != self.sid(id2):
            return False
        return all(x == y or self._identical_arrays(x, y) or self._identical_structs(x, y)
                   for x, y in zip(self.kids(id1), self.kids(id2)))

    def _merge_hypot(self) -> None:
        """Keep what an equivalent walk learnt: FWD resolutions, and the
        structs of the candidate graph that now have a canonical match."""
        m, kinds, composite = self.map, self.kinds, self.composite
        adjust = self.adjust_canon
        for c_id, t_id in self.hypot.items():
            j = m[t_id]
            while j >= 0 and j != t_id:
                t_id = j
                j = m[t_id]
            j = m[c_id]
            while j >= 0 and j != c_id:
                c_id = j
                j = m[c_id]
            tk, ck = kinds[t_id], kinds[c_id]
            if ck is _FWD:
                if tk is not _FWD:
                    m[c_id] = t_id
            elif adjust:
                continue
            elif tk is _FWD:
                m[t_id] = c_id
            elif tk in composite and m[c_id] >= 0 and m[t_id] < 0:
                m[t_id] = c_id

    def resolve_fwds(self) -> None:
        """Map each FWD still canonical to the one struct/union of its name."""
        kinds, types, m, start = self.kinds, self.types, self.map, self.start
        composite = self.composite
        fwds = [i for i in range(start, len(kinds)) if kinds[i] is _FWD and m[i] == i]
        if not fwds:
            return
        # The base's structs and unions are all canonical: only FWDs and
        # enums of the base ever map elsewhere.
        own: dict[str, int] = {}
        for i in range(start, len(kinds)):
            if kinds[i] in composite and m[i] == i:
                t = types[i]
                assert t is not None
                own[t.name] = 0 if t.name in own else i
        for i in fwds:
            t = types[i]
            assert t is not None
            name = t.name
            c = own.get(name, 0)
            if self.btf.base is not None:
                in_base = self.base.composite(name)
                if in_base is not None:
                    c = 0 if name in own else in_base
            if c and kinds[c] is _fwd_kind(t):
                m[i] = c

    def ref_types(self) -> None:
        m = self.map
        for i in range(self.start, len(m)):
            if m[i] < 0:
                self._ref_type(i)

    def _ref_type(self, i: int) -> int:
        """Canonical id of type ``i``, deduplicating the reference types it
        leads to first (depth first, as libbpf).  Only reference types are
        still unmapped in this pass."""
        m = self.map
        j = m[i]
        if j == i:
            return i
        if j >= 0:
            return self.resolve(i)
        if j == _IN_PROGRESS:
            raise BtfError(f'type {i} refers to itself without a struct or union')
        m[i] = _IN_PROGRESS
        t = self.types[i]
        assert t is not None
        k = t.kind
        key: Key
        if k in self.chain:                     # _ref_key's commonest case, inline
            x = t.type
            key = (k, t.name, t.kflag, t.linkage, x if m[x] == x else self._ref_type(x))
        else:
            key = self._ref_key(t, self._ref_type)
        new_id = m[i] = self.table.first_or_add(key, i)
        return new_id

    def compact(self, consume: bool) -> Btf:
        return _compact(self.btf, self.types, self.map, consume)


def _resolve(m: list[int], i: int) -> int:
    """Follow map ``m`` from ``i`` to the current canonical id (or an unmapped id)."""
    j = m[i]
    while j >= 0 and j != i:
        i = j
        j = m[i]
    return i


def _compact(btf: Btf, types: list[BtfType | None], m: list[int], consume: bool) -> Btf:
    """The canonical own types of ``btf`` by map ``m`` (``types`` by id),
    in id order, with ids remapped (copies, or with ``consume`` the types
    themselves)."""
    start = btf.start_id
    n = len(m)
    ids = _id_list(n)
    new_id = ids[:start] + [-1] * (n - start)
    kept = [i for i in range(start, n) if m[i] == i]
    for k, i in enumerate(kept, start):
        new_id[i] = k
    final = new_id[:]
    # Base ids map to themselves, but for enum forwards a split enum took
    # over.  Only a moved id can end without a canonical copy.
    for i in compress(ids, map(ne, m, ids)):
        final[i] = new_id[_resolve(m, i)]
        if final[i] < 0:
            raise BtfError('a type resolves to a type that has no canonical copy')
    remap = final.__getitem__
    params: dict[Param, Param] = {}     # the kernel's prototypes share many
    out = [VOID]
    for i in kept:
        t = types[i]
        assert t is not None
        c = t if consume else t.copy()
        if t.kind is _FUNC_PROTO:       # BtfType.remap, one Param of each
            c.type = final[t.type]
            c.items = tuple([params.get(p) or params.setdefault(p, _new(Param, (p[0], final[p[1]])))
                             for p in t.items])
        else:
            c.remap(remap)
        out.append(c)
    return Btf(types=out, base=btf.base, byteorder=btf.byteorder)
