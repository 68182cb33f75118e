"""libbpf's btf__dedup through ctypes, and comparisons of two type tables:
the same types under the same ids, or the same graph up to renumbering.

The oracle is the installed libbpf.so.1 (Debian 12: libbpf 1.1.2, the one
pahole 1.24 links against).
"""
from __future__ import annotations

import ctypes
import os
import tempfile
from collections import Counter

from btf_shapes import kind_counts as shape_kind_counts
from libbpf import libbpf
from objbtf.btf import Btf, BtfType


def _checked(p: int | None, what: str) -> int:
    if not p:
        err = ctypes.get_errno()
        raise AssertionError(f'libbpf {what} failed: {os.strerror(err)} ({err})')
    return p


def _new(lib: ctypes.CDLL, raw: bytes, base: int | None) -> int:
    """A libbpf struct btf of ``raw``; split BTF goes through a file, as
    libbpf 1.1 does not export btf__new_split."""
    if base is None:
        return _checked(lib.btf__new(raw, len(raw)), 'btf__new')
    with tempfile.NamedTemporaryFile(suffix='.btf') as f:
        f.write(raw)
        f.flush()
        return _checked(lib.btf__parse_raw_split(f.name.encode(), base),
                        'btf__parse_raw_split')


def libbpf_dedup(raw: bytes, base_raw: bytes | None = None) -> bytes:
    """Raw BTF after libbpf's btf__dedup (split BTF on ``base_raw`` if given:
    the result then holds only the split part, as libbpf writes it)."""
    lib = libbpf()
    base = None
    if base_raw is not None:
        base = _checked(lib.btf__new(base_raw, len(base_raw)), 'btf__new (base)')
    try:
        btf = _new(lib, raw, base)
        try:
            err = lib.btf__dedup(btf, None)
            if err:
                raise AssertionError(f'libbpf btf__dedup failed: {os.strerror(-err)} ({err})')
            size = ctypes.c_uint32()
            data = _checked(lib.btf__raw_data(btf, ctypes.byref(size)), 'btf__raw_data')
            return ctypes.string_at(data, size.value)
        finally:
            lib.btf__free(btf)
    finally:
        if base is not None:
            lib.btf__free(base)


def kind_counts(btf: Btf) -> dict[str, int]:
    """btf_shapes.kind_counts, sorted by kind for the messages."""
    return dict(sorted(shape_kind_counts(btf).items()))


def describe(btf: Btf, type_id: int) -> str:
    """A type, and the kind and name of each type it refers to."""
    t = btf[type_id]
    refs = ', '.join(f'{r}: {btf[r].kind.name} {btf[r].name!r}' for r in t.refs())
    return f'[{type_id}] {t!r}\n      refers to {{{refs}}}'


def diff_btf(ours: Btf, theirs: Btf) -> str | None:
    """None if both tables hold the same types under the same ids, else a
    description of the first difference (kind counts, then the first id
    whose types differ, both printed)."""
    mine, other = kind_counts(ours), kind_counts(theirs)
    head = '' if mine == other else f'kind counts differ:\n  ours   {mine}\n  libbpf {other}\n'
    for (i, a), (_, b) in zip(ours.own(), theirs.own()):
        if a.key() != b.key():
            return (f'{head}first different type id {i}:\n  ours   {describe(ours, i)}\n'
                    f'  libbpf {describe(theirs, i)}')
    if len(ours) != len(theirs):
        return f'{head}ours has {len(ours)} types, libbpf {len(theirs)}'
    return head or None


def assert_same_btf(ours: Btf, theirs: Btf) -> None:
    problem = diff_btf(ours, theirs)
    assert problem is None, problem


def _colours(a: Btf, b: Btf) -> tuple[list[int], list[int]]:
    """Colour refinement over both tables at once: a type's colour is its
    key without ids, then that with its targets' colours, until no class
    splits.  Ids below a table's own types (void, base) are their own
    colour."""
    names: dict[object, int] = {}

    def shape(t: BtfType) -> int:
        blank = t.copy()
        blank.remap(lambda _i: 0)
        return names.setdefault(blank.key(), len(names))

    tables = (a, b)
    shapes = [[shape(t) for _, t in btf.own()] for btf in tables]
    colours = shapes
    count = len(set(shapes[0]) | set(shapes[1]))
    while True:
        step = [[names.setdefault((s, tuple(_colour(btf, cs, r) for r in t.refs())), len(names))
                 for s, (_, t) in zip(sh, btf.own())]
                for btf, sh, cs in zip(tables, shapes, colours)]
        colours, last, count = step, count, len(set(step[0]) | set(step[1]))
        if count == last:
            return colours[0], colours[1]


def _colour(btf: Btf, colours: list[int], type_id: int) -> object:
    i = type_id - btf.start_id
    return colours[i] if i >= 0 else ('fixed', type_id)


def isomorphism_problem(a: Btf, b: Btf) -> str | None:
    """None if the tables are the same type graph up to renumbering of their
    own types (bases must be the same ids), else why not.  Types are paired
    by colour, in id order within a colour, and the pairing checked."""
    if kind_counts(a) != kind_counts(b):
        return f'kind counts differ: {kind_counts(a)} against {kind_counts(b)}'
    ca, cb = _colours(a, b)
    count_a, count_b = Counter(ca), Counter(cb)
    if count_a != count_b:
        odd = next(i for i, c in enumerate(ca) if count_a[c] != count_b[c])
        return f'no counterpart for {describe(a, a.start_id + odd)}'
    by_colour: dict[int, list[int]] = {}
    for i in range(len(cb) - 1, -1, -1):
        by_colour.setdefault(cb[i], []).append(b.start_id + i)
    pair = {i: i for i in range(a.start_id)}
    for i, c in zip(range(a.start_id, a.next_id), ca):
        pair[i] = by_colour[c].pop()
    for i in range(a.start_id, a.next_id):
        t, u = a[i].copy(), b[pair[i]]
        t.remap(pair.__getitem__)
        if t.key() != u.key():
            return f'{describe(a, i)}\n  pairs with {describe(b, pair[i])}'
    return None


__all__ = ['assert_same_btf', 'diff_btf', 'isomorphism_problem', 'kind_counts', 'libbpf_dedup']
