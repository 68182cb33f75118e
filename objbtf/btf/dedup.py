"""BTF deduplication: the result of libbpf's ``btf__dedup`` on the same input.

The passes follow libbpf (src/btf.c), in its order:

1. strings: implicit, the model holds names as ``str`` and the writer lays
   out each referenced string once;
2. primitive types (INT, FLOAT, FWD, ENUM/ENUM64; an enum forward, vlen 0,
   matches a full enum of the same name);
3. STRUCT/UNION (and, upstream, TYPEDEF): candidates share a shallow
   signature, a depth-first graph walk with a hypothetical map decides
   equivalence and resolves FWDs it meets on the way;
4. FWDs still unresolved go to the only struct/union of their name;
5. reference types, bottom-up, keyed by their canonical targets;
6. compaction (canonical types in id order) and remapping.

Candidates are looked up by signature tuples instead of numeric hashes, but
visited in the order libbpf's hashmap visits them (newest first, reversed
by each table growth), so that the same canonical type wins when several
match and type ids come out as libbpf's.

``libbpf_1_1=True`` reproduces libbpf 1.1 (Debian 12, what pahole 1.24 uses)
instead of upstream libbpf: TYPEDEFs are deduplicated with the reference
types, and the fallback for a type met twice in one graph walk accepts only
exactly equal arrays and structs made of those, instead of a depth-limited
structural comparison.  Upstream compares an array's element types in that
fallback with itself (``a2 = btf_array(t1)``); this module compares the two
arrays' element types, as intended.
"""
from __future__ import annotations

from typing import Callable

from .errors import BtfError
from .kinds import Kind
from .types import VOID, Btf, BtfType, Param

_UNPROCESSED = -1
_IN_PROGRESS = -2
_IDENTICAL_DEPTH = 16

_STRUCT, _UNION, _FWD, _TYPEDEF = Kind.STRUCT, Kind.UNION, Kind.FWD, Kind.TYPEDEF
_ENUMS = (Kind.ENUM, Kind.ENUM64)
_COMPOSITE = (_STRUCT, _UNION)
#: Kinds whose graph walk just follows ``type`` once the headers agree.
_CHAIN = frozenset({Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.PTR,
                    Kind.TYPEDEF, Kind.FUNC, Kind.TYPE_TAG})
_PRIMITIVE = frozenset({Kind.INT, Kind.FLOAT, Kind.FWD, Kind.ENUM, Kind.ENUM64})
#: Other kinds deduplicated by their canonical targets.
_REFERENCING = frozenset({Kind.ARRAY, Kind.FUNC_PROTO, Kind.DECL_TAG})
#: Kinds a structural comparison descends into.
_GRAPH = frozenset({Kind.STRUCT, Kind.UNION, Kind.ARRAY, Kind.FUNC_PROTO})

Key = tuple
#: Where an entry of a STRUCT, UNION or DATASEC holds its type id.
_ENTRY_TYPE = {Kind.STRUCT: 1, Kind.UNION: 1, Kind.DATASEC: 0}
Resolve = Callable[[int], int]


def dedup(btf: Btf, *, libbpf_1_1: bool = False) -> Btf:
    """A new, deduplicated copy of ``btf`` (split BTF stays on its base)."""
    d = _Dedup(btf, libbpf_1_1)
    d.prep_base()
    d.prim_types()
    d.struct_types()
    d.resolve_fwds()
    d.ref_types()
    return d.compact()


# Signatures.  ``_shape`` is everything a graph walk compares but the
# referenced ids, ``_children`` the ids it then compares pairwise; a table
# key is the shape plus the canonical children.  Equal keys mean equal hashes
# in libbpf and, for every kind but the enums (and STRUCT, UNION and, upstream,
# TYPEDEF, which are keyed by shape alone), equal types.

def _shape(t: BtfType) -> tuple:
    k = t.kind
    if k in _COMPOSITE:
        return (k, t.name, t.kflag, t.size,
                tuple([(m.name, m.bit_offset, m.bitfield_size) for m in t.items]))
    if k in _CHAIN:
        return (k, t.name, t.kflag, t.linkage)
    if k is Kind.ARRAY:
        return (k, t.name, t.kflag, t.nelems)
    if k is Kind.FUNC_PROTO:
        return (k, t.name, t.kflag, tuple([p.name for p in t.items]))
    if k is Kind.INT:
        return (k, t.name, t.kflag, t.size, t.encoding, t.bit_offset, t.bits)
    if k is Kind.FLOAT:
        return (k, t.name, t.kflag, t.size)
    if k is _FWD:
        return (k, t.name, t.kflag, t.type)
    if k in _ENUMS:
        return (k, t.name, t.kflag, t.size, t.items)
    if k is Kind.DECL_TAG:
        return (k, t.name, t.kflag, t.component_idx)
    return (k, t.name)


def _children(t: BtfType) -> tuple[int, ...]:
    """Referenced ids in the order a graph walk compares them."""
    k = t.kind
    if k in _CHAIN:
        return (t.type,)
    if k is Kind.ARRAY:
        return (t.index_type, t.type)
    if k in _COMPOSITE:
        return tuple([m.type for m in t.items])
    if k is Kind.FUNC_PROTO:
        return (t.type, *[p.type for p in t.items])
    if k in _PRIMITIVE:
        return ()
    raise BtfError(f'a struct or union graph reaches a {k.name}')


def _key(t: BtfType, ref: Resolve, typedef_shallow: bool) -> Key:
    """Table key of ``t``; ``ref`` gives the canonical id of a target and
    is called in the order libbpf deduplicates targets (element first)."""
    k = t.kind
    if k in _CHAIN and not (k is _TYPEDEF and typedef_shallow):
        return (k, t.name, t.kflag, t.linkage, ref(t.type))
    if k in _ENUMS:
        return (Kind.ENUM, t.name)
    if k is Kind.ARRAY:
        elem = ref(t.type)
        return (k, t.name, t.kflag, t.nelems, elem, ref(t.index_type))
    if k is Kind.FUNC_PROTO:
        ret = ref(t.type)
        return (k, t.name, t.kflag, ret, tuple([(p.name, ref(p.type)) for p in t.items]))
    if k is Kind.DECL_TAG:
        return (k, t.name, t.kflag, t.component_idx, ref(t.type))
    if k in _COMPOSITE or k in _PRIMITIVE or k is _TYPEDEF:
        return _shape(t)
    raise BtfError(f'cannot deduplicate a type of kind {k.name}')


def _identity(type_id: int) -> int:
    return type_id


def _equal_enum(a: BtfType, b: BtfType) -> bool:
    return _shape(a) == _shape(b)


def _compat_enum(a: BtfType, b: BtfType) -> bool:
    """Equal, or one is a forward (vlen 0) of the other, ENUM or ENUM64."""
    if a.items and b.items:
        return _equal_enum(a, b)
    return a.name == b.name and a.kind in _ENUMS and b.kind in _ENUMS


def _leaf_equal(a: BtfType, b: BtfType) -> bool:
    """Equality of two types of the same primitive kind."""
    if a.kind in _ENUMS:
        return _compat_enum(a, b)
    return _shape(a) == _shape(b)


def _fwd_kind(t: BtfType) -> Kind:
    return _UNION if t.kflag else _STRUCT


def _all_types(btf: Btf) -> list[BtfType]:
    """Every type by id: those of the bases, void first, then btf's own."""
    if btf.base is None:
        return list(btf.types)
    return _all_types(btf.base) + list(btf.types)


class _Candidates:
    """libbpf's dedup table: canonical ids per signature, in the order its
    hashmap yields them.  The hashmap pushes entries at the head of their
    bucket and rehashes by walking each bucket, which reverses entries of
    one key whenever it grows; lists here are kept with the parity of the
    growths they have seen."""

    def __init__(self) -> None:
        self._lists: dict[Key, list] = {}
        self._size = 0
        self._cap = 0
        self._grows = 0

    def get(self, key: Key) -> list[int]:
        entry = self._lists.get(key)
        if entry is None:
            return []
        if (self._grows - entry[0]) & 1:
            entry[1].reverse()
        entry[0] = self._grows
        return entry[1]

    def first(self, key: Key) -> int | None:
        ids = self.get(key)
        return ids[0] if ids else None

    def add(self, key: Key, type_id: int) -> None:
        if (self._size + 1) * 4 // 3 > self._cap:
            self._cap = max(4, self._cap * 2)
            self._grows += 1
        self._size += 1
        if key in self._lists:
            self.get(key).insert(0, type_id)
        else:
            self._lists[key] = [self._grows, [type_id]]


class _Dedup:
    """State shared by the passes: ``map`` sends each id towards its
    canonical id (libbpf's ``d->map``), ``hypot`` is the hypothetical
    canonical-to-candidate map of one graph walk."""

    def __init__(self, btf: Btf, libbpf_1_1: bool) -> None:
        self.btf = btf
        self.legacy = libbpf_1_1
        self.start = btf.start_id
        self.types = _all_types(btf)
        self.kinds = [t.kind for t in self.types]
        never = (Kind.VAR, Kind.DATASEC)
        self.map = [i if k in never else _UNPROCESSED for i, k in enumerate(self.kinds)]
        self.map[0] = 0
        self.table = _Candidates()
        self.hypot: dict[int, int] = {}
        self.adjust_canon = False
        self.shapes: list[tuple | None] = [None] * len(self.types)
        self.children: list[tuple[int, ...] | None] = [None] * len(self.types)

    # -- helpers ----------------------------------------------------------

    def resolve(self, i: int) -> int:
        """Follow ``map`` to the current canonical id (or an unmapped id)."""
        m = self.map
        j = m[i]
        while j >= 0 and j != i:
            i = j
            j = m[i]
        return i

    def shape(self, i: int) -> tuple:
        s = self.shapes[i]
        if s is None:
            s = self.shapes[i] = _shape(self.types[i])
        return s

    def kids(self, i: int) -> tuple[int, ...]:
        c = self.children[i]
        if c is None:
            c = self.children[i] = _children(self.types[i])
        return c

    def _add_canonical(self, key: Key, type_id: int, new_id: int) -> None:
        self.map[type_id] = new_id
        if new_id == type_id:
            self.table.add(key, type_id)

    # -- passes -----------------------------------------------------------

    def prep_base(self) -> None:
        """Base types are canonical as they are and serve as candidates."""
        shallow = not self.legacy
        for i in range(1, self.start):
            self.map[i] = i
            if self.kinds[i] not in (Kind.VAR, Kind.DATASEC):
                self.table.add(_key(self.types[i], _identity, shallow), i)

    def prim_types(self) -> None:
        types, kinds = self.types, self.kinds
        for i in range(self.start, len(types)):
            k = kinds[i]
            if k in _PRIMITIVE:
                if k in _ENUMS:
                    self._prim_enum(i)
                else:
                    key = self.shape(i)
                    found = self.table.first(key)
                    self._add_canonical(key, i, i if found is None else found)

    def _prim_enum(self, i: int) -> None:
        t = self.types[i]
        key = (Kind.ENUM, t.name)
        new_id = i
        for c in self.table.get(key):
            cand = self.types[c]
            if _equal_enum(t, cand):
                new_id = c
                break
            if _compat_enum(t, cand):
                if not t.items:
                    new_id = c
                    break
                self.map[c] = i      # a canonical enum forward goes to t
        self._add_canonical(key, i, new_id)

    def struct_types(self) -> None:
        kinds = self.kinds
        graph_kinds = _COMPOSITE if self.legacy else (_STRUCT, _UNION, _TYPEDEF)
        for i in range(self.start, len(kinds)):
            if kinds[i] in graph_kinds and self.map[i] < 0:
                self._struct_type(i)

    def _struct_type(self, i: int) -> None:
        key = self.shape(i)
        new_id = i
        for c in self.table.get(key):
            self.hypot.clear()
            self.adjust_canon = False
            if not self.is_equiv(i, c):
                continue
            self._merge_hypot()
            if not self.adjust_canon:
                new_id = c
                break
        self._add_canonical(key, i, new_id)

    def is_equiv(self, cand_id: int, canon_id: int) -> bool:
        """Whether the graphs from ``cand_id`` and ``canon_id`` are the same
        type: libbpf's btf_dedup_is_equiv, a depth-first walk of both that
        records in ``hypot`` which candidate type each canonical one met."""
        m, kinds, hypot = self.map, self.kinds, self.hypot
        shape, kids = self.shape, self.kids
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
            if kinds[canon] is _FWD and kinds[b] is not _FWD:
                canon = b                 # follow a resolved FWD
            seen = hypot.get(canon)
            if seen is not None:
                if seen == cand or self._identical(seen, cand):
                    continue
                return False
            hypot[canon] = cand
            ka, kb = kinds[cand], kinds[canon]
            if ka is not kb:
                if _FWD in (ka, kb) and self._fwd_matches(cand, canon):
                    continue
                return False
            if shape(cand) != shape(canon):
                if ka in _ENUMS and _compat_enum(self.types[cand], self.types[canon]):
                    continue
                return False
            ca = kids(cand)
            if ca:
                push(zip(reversed(ca), reversed(kids(canon))))
        return True

    def _fwd_matches(self, cand: int, canon: int) -> bool:
        """A FWD on one side, a struct/union of its name and kind on the
        other."""
        a, b = self.types[cand], self.types[canon]
        if a.name != b.name:
            return False
        if a.kind is _FWD:
            return _fwd_kind(a) is b.kind
        if _fwd_kind(b) is not a.kind:
            return False
        if canon < self.start:
            self.adjust_canon = True     # would resolve a base FWD
        return True

    def _identical(self, id1: int, id2: int) -> bool:
        """Whether a type met twice in one walk is the same both times."""
        if self.legacy:
            return self._identical_arrays(id1, id2) or self._identical_structs(id1, id2)
        return self._identical_types(id1, id2, _IDENTICAL_DEPTH)

    def _identical_types(self, id1: int, id2: int, depth: int) -> bool:
        """Structurally the same type, looking ``depth`` levels deep."""
        kinds = self.kinds
        while kinds[id1] in _CHAIN and self.shape(id1) == self.shape(id2):
            id1, id2 = self.types[id1].type, self.types[id2].type
        k = kinds[id1]
        if depth <= 0 or k is not kinds[id2]:
            return False
        if k is Kind.UNKN:
            return True
        if k in _ENUMS:
            return _compat_enum(self.types[id1], self.types[id2])
        if k in _CHAIN or k not in _PRIMITIVE and k not in _GRAPH:
            return False
        return self.shape(id1) == self.shape(id2) and all(
            x == y or self._identical_types(x, y, depth - 1)
            for x, y in zip(self.kids(id1), self.kids(id2)))

    def _identical_arrays(self, id1: int, id2: int) -> bool:
        """libbpf 1.1: two ARRAYs equal to the referenced ids."""
        return (self.kinds[id1] is Kind.ARRAY and self.kinds[id2] is Kind.ARRAY
                and self.shape(id1) == self.shape(id2) and self.kids(id1) == self.kids(id2))

    def _identical_structs(self, id1: int, id2: int) -> bool:
        """libbpf 1.1: two structs (unions) whose members are the same ids,
        identical arrays or identical structs."""
        if self.kinds[id1] not in _COMPOSITE or self.shape(id1) != self.shape(id2):
            return False
        return all(x == y or self._identical_arrays(x, y) or self._identical_structs(x, y)
                   for x, y in zip(self.kids(id1), self.kids(id2)))

    def _merge_hypot(self) -> None:
        """Keep what an equivalent walk learnt: FWD resolutions, and
        structs of the candidate graph that now have a canonical match."""
        m, kinds, resolve = self.map, self.kinds, self.resolve
        adjust = self.adjust_canon
        for canon, targ in self.hypot.items():
            t_id, c_id = resolve(targ), resolve(canon)
            tk, ck = kinds[t_id], kinds[c_id]
            if ck is _FWD:
                if tk is not _FWD:
                    m[c_id] = t_id
            elif adjust:
                continue
            elif tk is _FWD:
                m[t_id] = c_id
            elif tk in _COMPOSITE and m[c_id] >= 0 and m[t_id] < 0:
                m[t_id] = c_id

    def resolve_fwds(self) -> None:
        """Map each FWD still canonical to the one struct/union of its name."""
        kinds, types, m = self.kinds, self.types, self.map
        unique: dict[str, int] = {}
        for i in range(1, len(types)):
            if kinds[i] in _COMPOSITE and m[i] == i:
                name = types[i].name
                unique[name] = 0 if name in unique else i
        for i in range(self.start, len(types)):
            if kinds[i] is _FWD and m[i] == i:
                c = unique.get(types[i].name, 0)
                if c and kinds[c] is _fwd_kind(types[i]):
                    m[i] = c

    def ref_types(self) -> None:
        m = self.map
        for i in range(self.start, len(self.types)):
            if m[i] < 0:
                self._ref_type(i)

    def _ref_type(self, i: int) -> int:
        """Canonical id of reference type ``i``, deduplicating its targets
        first (depth first, as libbpf)."""
        m = self.map[i]
        if m == i:
            return i
        if m >= 0:
            return self.resolve(i)
        if m == _IN_PROGRESS:
            raise BtfError(f'type {i} refers to itself without a struct or union')
        self.map[i] = _IN_PROGRESS
        key = _key(self.types[i], self._ref_type, not self.legacy)
        found = self.table.first(key)
        new_id = i if found is None else found
        self._add_canonical(key, i, new_id)
        return new_id

    def compact(self) -> Btf:
        """The canonical own types, in id order, with ids remapped."""
        start, m = self.start, self.map
        new_id = list(range(start)) + [-1] * (len(self.types) - start)
        kept = []
        for i in range(start, len(self.types)):
            if m[i] == i:
                new_id[i] = start + len(kept)
                kept.append(i)
        final = [new_id[self.resolve(i)] for i in range(len(self.types))]
        out = [_remapped(self.types[i], final) for i in kept]
        if -1 in final:
            raise BtfError('a type refers to a type that has no canonical copy')
        return Btf(types=[VOID] + out, base=self.btf.base, byteorder=self.btf.byteorder)


def _remapped(t: BtfType, new: list[int]) -> BtfType:
    """A copy of ``t`` whose reference to each id ``i`` is now ``new[i]``
    (BtfType.remap, without rebuilding unchanged entry tuples)."""
    c = t.copy()
    k = t.kind
    if k in _COMPOSITE or k is Kind.DATASEC:
        if any(new[e[_ENTRY_TYPE[k]]] != e[_ENTRY_TYPE[k]] for e in t.items):
            c.remap(new.__getitem__)
        return c
    if k in _PRIMITIVE:
        return c
    c.type = new[t.type]
    if k is Kind.ARRAY:
        c.index_type = new[t.index_type]
    elif k is Kind.FUNC_PROTO and any(new[p.type] != p.type for p in t.items):
        c.items = tuple([Param(p.name, new[p.type]) for p in t.items])
    return c
