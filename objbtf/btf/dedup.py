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

``libbpf_1_1=True`` reproduces libbpf 1.1 (Debian 12; pahole 1.24 uses it)
rather than upstream libbpf: TYPEDEFs are deduplicated with the reference
types, and when one graph walk meets a canonical type twice, the two
candidate types must be arrays with equal ids, or structs made of those,
rather than structurally identical down to 16 levels.  Upstream compares an
array's element types in that check with themselves (``a2 =
btf_array(t1)``); here the two arrays' element types are compared.
"""
from __future__ import annotations

from collections.abc import Callable

from .errors import BtfError
from .kinds import Kind
from .types import VOID, Btf, BtfType, Param

_UNPROCESSED = -1
_IN_PROGRESS = -2
_IDENTICAL_DEPTH = 16

_STRUCT, _UNION, _FWD, _TYPEDEF = Kind.STRUCT, Kind.UNION, Kind.FWD, Kind.TYPEDEF
_ENUMS = (Kind.ENUM, Kind.ENUM64)
_COMPOSITE = (_STRUCT, _UNION)
_NEVER_DEDUPED = (Kind.VAR, Kind.DATASEC)
#: Kinds whose graph walk follows ``type`` once the headers agree.
_CHAIN = frozenset({Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.PTR,
                    Kind.TYPEDEF, Kind.FUNC, Kind.TYPE_TAG})
_PRIMITIVE = frozenset({Kind.INT, Kind.FLOAT, Kind.FWD, Kind.ENUM, Kind.ENUM64})
#: Kinds a structural comparison descends into.
_GRAPH = frozenset({Kind.STRUCT, Kind.UNION, Kind.ARRAY, Kind.FUNC_PROTO})
#: Where an entry of a STRUCT, UNION or DATASEC holds its type id.
_ENTRY_TYPE = {Kind.STRUCT: 1, Kind.UNION: 1, Kind.DATASEC: 0}

Key = object
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


def _shape(t: BtfType) -> tuple:
    """All a graph walk compares of ``t`` but the ids it refers to."""
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
    return (k, t.name)


def _children(t: BtfType) -> tuple[int, ...]:
    """Referenced ids, in the order a graph walk compares them."""
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


def _ref_key(t: BtfType, ref: Resolve) -> Key:
    """Table key of a reference type: header and canonical targets; ``ref``
    gives those, called in libbpf's order (element before index)."""
    k = t.kind
    if k in _CHAIN:
        return (k, t.name, t.kflag, t.linkage, ref(t.type))
    if k is Kind.ARRAY:
        elem = ref(t.type)
        return (k, t.name, t.kflag, t.nelems, elem, ref(t.index_type))
    if k is Kind.FUNC_PROTO:
        ret = ref(t.type)
        return (k, t.name, t.kflag, ret, tuple([(p.name, ref(p.type)) for p in t.items]))
    if k is Kind.DECL_TAG:
        return (k, t.name, t.kflag, t.component_idx, ref(t.type))
    raise BtfError(f'cannot deduplicate a type of kind {k.name}')


def _identity(type_id: int) -> int:
    return type_id


def _enum_fwd_match(a: BtfType, b: BtfType) -> bool:
    """Two enums of one name, at least one a forward (vlen 0)."""
    return a.name == b.name and not (a.items and b.items)


def _fwd_kind(t: BtfType) -> Kind:
    return _UNION if t.kflag else _STRUCT


def _all_types(btf: Btf) -> list[BtfType]:
    """Every type by id: those of the bases, void first, then btf's own."""
    if btf.base is None:
        return list(btf.types)
    return _all_types(btf.base) + list(btf.types)


class _Candidates:
    """libbpf's dedup table: canonical ids per key, in the order its hashmap
    yields them.  The hashmap pushes an entry at the head of its bucket and
    rehashes by walking each bucket, which reverses the entries of one key
    whenever it grows; each list here remembers how many growths it saw."""

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
    """State shared by the passes.  ``map`` sends each id towards its
    canonical id (libbpf's ``d->map``, negative while unprocessed);
    ``hypot`` maps canonical to candidate ids during one graph walk."""

    def __init__(self, btf: Btf, libbpf_1_1: bool) -> None:
        self.btf = btf
        self.legacy = libbpf_1_1
        self.start = btf.start_id
        self.types = _all_types(btf)
        self.kinds = [t.kind for t in self.types]
        self.map = [i if k in _NEVER_DEDUPED else _UNPROCESSED
                    for i, k in enumerate(self.kinds)]
        self.map[0] = 0
        self.table = _Candidates()
        self.hypot: dict[int, int] = {}
        self.adjust_canon = False
        self.shape_ids: dict[tuple, int] = {}
        self.sids = [-1] * len(self.types)
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

    def sid(self, i: int) -> int:
        """Shape id: equal for types of equal ``_shape``."""
        s = self.sids[i]
        if s < 0:
            s = self.sids[i] = self.shape_ids.setdefault(
                _shape(self.types[i]), len(self.shape_ids))
        return s

    def kids(self, i: int) -> tuple[int, ...]:
        c = self.children[i]
        if c is None:
            c = self.children[i] = _children(self.types[i])
        return c

    def key(self, i: int, ref: Resolve) -> Key:
        """Table key: shape for what graph walks compare, the name for an
        enum (forwards match full enums), else header and targets."""
        k = self.kinds[i]
        if k in _ENUMS:
            return (Kind.ENUM, self.types[i].name)
        if k in _COMPOSITE or k in _PRIMITIVE or (k is _TYPEDEF and not self.legacy):
            return self.sid(i)
        return _ref_key(self.types[i], ref)

    def _set_canonical(self, key: Key, type_id: int, new_id: int) -> None:
        self.map[type_id] = new_id
        if new_id == type_id:
            self.table.add(key, type_id)

    # -- passes -----------------------------------------------------------

    def prep_base(self) -> None:
        """Base types are canonical as they are and serve as candidates."""
        for i in range(1, self.start):
            self.map[i] = i
            if self.kinds[i] not in _NEVER_DEDUPED:
                self.table.add(self.key(i, _identity), i)

    def prim_types(self) -> None:
        kinds = self.kinds
        for i in range(self.start, len(kinds)):
            k = kinds[i]
            if k in _ENUMS:
                self._prim_enum(i)
            elif k in _PRIMITIVE:
                key = self.sid(i)
                found = self.table.first(key)
                self._set_canonical(key, i, i if found is None else found)

    def _prim_enum(self, i: int) -> None:
        t = self.types[i]
        key = self.key(i, _identity)
        new_id = i
        for c in self.table.get(key):
            if self.sid(i) == self.sid(c):
                new_id = c
                break
            if _enum_fwd_match(t, self.types[c]):
                if not t.items:
                    new_id = c
                    break
                self.map[c] = i      # a canonical enum forward goes to t
        self._set_canonical(key, i, new_id)

    def struct_types(self) -> None:
        kinds = self.kinds
        walked = _COMPOSITE if self.legacy else (_STRUCT, _UNION, _TYPEDEF)
        for i in range(self.start, len(kinds)):
            if kinds[i] in walked and self.map[i] < 0:
                self._struct_type(i)

    def _struct_type(self, i: int) -> None:
        key = self.sid(i)
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
        a, b = self.types[cand], self.types[canon]
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
        return ka is kb and ka in _ENUMS and _enum_fwd_match(a, b)

    def _identical(self, id1: int, id2: int) -> bool:
        """Whether the two candidate types one canonical type met are the
        same (a compiler may emit a type twice in one unit)."""
        if self.legacy:
            return self._identical_arrays(id1, id2) or self._identical_structs(id1, id2)
        return self._identical_types(id1, id2, _IDENTICAL_DEPTH)

    def _identical_types(self, id1: int, id2: int, depth: int) -> bool:
        """Structurally the same type, looking ``depth`` levels deep."""
        kinds, sid = self.kinds, self.sid
        while kinds[id1] in _CHAIN and sid(id1) == sid(id2):
            id1, id2 = self.types[id1].type, self.types[id2].type
        k = kinds[id1]
        if depth <= 0 or k is not kinds[id2]:
            return False
        if k is Kind.UNKN:
            return True
        if k in _ENUMS:
            return sid(id1) == sid(id2) or _enum_fwd_match(self.types[id1], self.types[id2])
        if k not in _PRIMITIVE and k not in _GRAPH:
            return False
        return sid(id1) == sid(id2) and all(
            x == y or self._identical_types(x, y, depth - 1)
            for x, y in zip(self.kids(id1), self.kids(id2)))

    def _identical_arrays(self, id1: int, id2: int) -> bool:
        """libbpf 1.1: two ARRAYs equal down to the ids they refer to."""
        return (self.kinds[id1] is Kind.ARRAY and self.kinds[id2] is Kind.ARRAY
                and self.sid(id1) == self.sid(id2) and self.kids(id1) == self.kids(id2))

    def _identical_structs(self, id1: int, id2: int) -> bool:
        """libbpf 1.1: two structs (unions) whose members are the same ids,
        identical arrays or identical structs."""
        if self.kinds[id1] not in _COMPOSITE or self.sid(id1) != self.sid(id2):
            return False
        return all(x == y or self._identical_arrays(x, y) or self._identical_structs(x, y)
                   for x, y in zip(self.kids(id1), self.kids(id2)))

    def _merge_hypot(self) -> None:
        """Keep what an equivalent walk learnt: FWD resolutions, and the
        structs of the candidate graph that now have a canonical match."""
        m, kinds = self.map, self.kinds
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
        for i in range(self.start, len(m)):
            if m[i] < 0:
                self._ref_type(i)

    def _ref_type(self, i: int) -> int:
        """Canonical id of type ``i``, deduplicating the reference types it
        leads to first (depth first, as libbpf)."""
        m = self.map[i]
        if m == i:
            return i
        if m >= 0:
            return self.resolve(i)
        if m == _IN_PROGRESS:
            raise BtfError(f'type {i} refers to itself without a struct or union')
        self.map[i] = _IN_PROGRESS
        key = self.key(i, self._ref_type)
        found = self.table.first(key)
        new_id = i if found is None else found
        self._set_canonical(key, i, new_id)
        return new_id

    def compact(self) -> Btf:
        """The canonical own types, in id order, with ids remapped."""
        start, m = self.start, self.map
        new_id = list(range(start)) + [-1] * (len(m) - start)
        kept = []
        for i in range(start, len(m)):
            if m[i] == i:
                new_id[i] = start + len(kept)
                kept.append(i)
        final = [new_id[self.resolve(i)] for i in range(len(m))]
        if -1 in final:
            raise BtfError('a type resolves to a type that has no canonical copy')
        out = [_remapped(self.types[i], final) for i in kept]
        return Btf(types=[VOID] + out, base=self.btf.base, byteorder=self.btf.byteorder)


def _remapped(t: BtfType, new: list[int]) -> BtfType:
    """A copy of ``t`` whose reference to each id ``i`` is now ``new[i]``
    (BtfType.remap, without rebuilding unchanged entry tuples)."""
    c = t.copy()
    k = t.kind
    if k in _ENTRY_TYPE:
        at = _ENTRY_TYPE[k]
        if any(new[e[at]] != e[at] for e in t.items):
            c.remap(new.__getitem__)
    elif k not in _PRIMITIVE and k is not Kind.UNKN:
        c.type = new[t.type]
        if k is Kind.ARRAY:
            c.index_type = new[t.index_type]
        elif k is Kind.FUNC_PROTO and any(new[p.type] != p.type for p in t.items):
            c.items = tuple([Param(p.name, new[p.type]) for p in t.items])
    return c
