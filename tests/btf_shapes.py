"""Compare two BTF tables whose type ids differ: each type as its shape (kind,
name, sizes, members; anonymous types it refers to spelled out, named ones
by kind and name), counted.  Two tables with the same counted shapes hold
the same types, whatever their order.

Used to check that the compiler-BTF path (GCC ``-gbtf``) gives what the
DWARF path gives for the same source, once the differences GCC's BTF forces
are derived and applied to the DWARF side (``without_wide_enumerators``).
"""
from __future__ import annotations

from collections import Counter

from objbtf.btf import Btf, Kind
from objbtf.btf.types import Enumerator

INT32 = range(-2**31, 2**31)
#: How deep anonymous types are spelled out (a kernel struct's anonymous
#: unions nest a few levels).
DEPTH = 6


def shape(btf: Btf, type_id: int, depth: int = 0) -> tuple:
    """A type's shape: refs to named types by (kind, name), anonymous ones in full."""
    t = btf[type_id]
    if type_id == 0:
        return ('void',)
    named = t.name and t.kind not in (Kind.VAR, Kind.FUNC, Kind.DECL_TAG, Kind.TYPE_TAG)
    if depth and named:
        return (t.kind.name, t.name)
    if depth > DEPTH:
        return (t.kind.name, '...')
    d = depth + 1
    k = t.kind
    if k in (Kind.STRUCT, Kind.UNION):
        body = tuple((m.name, m.bit_offset, m.bitfield_size, shape(btf, m.type, d))
                     for m in t.items)
    elif k is Kind.FUNC_PROTO:
        body = tuple((p.name, shape(btf, p.type, d)) for p in t.items)
    elif k in (Kind.ENUM, Kind.ENUM64):
        body = tuple(t.items)
    elif k is Kind.DATASEC:
        body = tuple((v.offset, v.size, shape(btf, v.type, d)) for v in t.items)
    elif k is Kind.ARRAY:
        body = (t.nelems, shape(btf, t.type, d), shape(btf, t.index_type, d))
    elif k is Kind.INT:
        body = (t.encoding, t.bit_offset, t.bits)
    else:
        body = ()
    ref = shape(btf, t.type, d) if k not in (Kind.INT, Kind.FLOAT, Kind.ENUM, Kind.ENUM64,
                                            Kind.FWD, Kind.STRUCT, Kind.UNION, Kind.DATASEC,
                                            Kind.ARRAY) else ()
    return (k.name, t.name, t.size, t.kflag, t.linkage, t.component_idx, ref, body)


def shapes(btf: Btf) -> Counter:
    return Counter(shape(btf, i) for i, _ in btf.own())


def kind_counts(btf: Btf) -> Counter:
    return Counter(t.kind.name for _, t in btf.own())


def named_types(btf: Btf) -> Counter:
    """(kind, name, size, vlen) of every named type but VARs, FUNCs, DATASECs."""
    return Counter((t.kind.name, t.name, t.size, t.vlen) for _, t in btf.own()
                   if t.name and t.kind not in (Kind.VAR, Kind.DATASEC, Kind.FUNC))


def lost_enumerators(btf: Btf) -> dict[str, list[str]]:
    """Per enum, the enumerators GCC 12's BTF cannot hold: it stores each
    value as the compiler's 64-bit signed integer cut to 32 bits, and drops
    a value outside the 32-bit signed range (gcc/ctfc.cc,
    ``ctf_add_enumerator``)."""
    out: dict[str, list[str]] = {}
    for _, t in btf.own():
        if t.kind in (Kind.ENUM, Kind.ENUM64):
            lost = [e.name for e in t.items if _as_s64(e.value) not in INT32]
            if lost:
                out[t.name] = lost
    return out


def without_wide_enumerators(btf: Btf) -> Btf:
    """A copy of ``btf`` (the DWARF path's) as GCC's BTF can give it: enums
    without the enumerators ``lost_enumerators`` names, and, since GCC's BTF
    has no signedness, the signed flag set when a value left is negative
    (ENUM64 values as signed 64-bit numbers)."""
    types = [t.copy() for t in btf.types]
    for t in types:
        if t.kind not in (Kind.ENUM, Kind.ENUM64):
            continue
        kept = [e for e in t.items if _as_s64(e.value) in INT32]
        if t.kind is Kind.ENUM64:
            kept = [Enumerator(e.name, _as_s64(e.value)) for e in kept]
        t.items = tuple(kept)
        t.kflag = int(any(e.value < 0 for e in kept))
    return Btf(types, byteorder=btf.byteorder)


def _as_s64(v: int) -> int:
    v &= 2**64 - 1
    return v - 2**64 if v >= 2**63 else v


def describe(counter: Counter, limit: int = 8) -> str:
    items = sorted(counter.elements(), key=repr)
    more = f' and {len(items) - limit} more' if len(items) > limit else ''
    return ', '.join(repr(i)[:200] for i in items[:limit]) + more


def same_types(ours: Btf, theirs: Btf) -> list[str]:
    """What differs between the two tables' shapes (empty: the same types)."""
    a, b = shapes(ours), shapes(theirs)
    if a == b:
        return []
    return [f'only in the first: {describe(a - b)}', f'only in the second: {describe(b - a)}']

