"""objbtf.btf.dedup against libbpf's btf__dedup.

The oracle is the installed libbpf.so.1 (libbpf 1.1.2, which pahole 1.24
uses): ``dedup(btf, libbpf_1_1=True)`` must give the very same type table.
The default, upstream semantics must give the same table too, except on
the two inputs built to show where upstream libbpf differs from 1.1.
"""
from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import FIXTURES, need, run
from libbpf import LIBBPF
from libbpf_oracle import (assert_same_btf, diff_btf, isomorphism_problem, kind_counts,
                           libbpf_dedup)
from objbtf.btf import (Btf, BtfType, Enumerator, Kind, Member, Param, VarSecinfo,
                        encode_btf, parse_btf)
from objbtf.btf.dedup import HeadsBase, _Candidates, _Dedup, _growth_points, dedup
from objbtf.btf.errors import BtfError
from objbtf.btf.kinds import KINDS, KindRegistry
from objbtf.btf.types import VOID
from pahole_compare import pahole_btf

HERE = FIXTURES / 'dedup'
UNITS = sorted(HERE.glob('unit_*.c'))


# -- building inputs ---------------------------------------------------------

def append(out: Btf, unit: Btf) -> None:
    """Append the own types of ``unit`` (a base BTF) to ``out``, ids shifted."""
    shift = out.next_id - 1
    for _, t in unit.own():
        c = t.copy()
        c.remap(lambda i: i + shift if i else 0)
        out.add(c)


def concat(units: list[Btf], base: Btf | None = None) -> Btf:
    """One table holding every unit's types, as a linker concatenating
    .BTF sections would; split on ``base`` if given."""
    out = Btf(base=base)
    for unit in units:
        append(out, unit)
    return out


def pahole_units(tmp: Path, sources: list[Path]) -> list[Btf]:
    """Each source compiled by gcc and by clang, then encoded by pahole."""
    need('pahole')
    btfs = []
    for compiler in ('gcc', 'clang'):
        need(compiler)
        for src in sources:
            obj = tmp / f'{src.stem}.{compiler}.o'
            run(compiler, '-g', '-O1', '-c', '-Wno-attributes', '-o', obj, src)
            btfs.append(pahole_btf(obj))
    return btfs


def check(btf: Btf, base_raw: bytes | None = None, upstream_too: bool = True) -> Btf:
    """Dedup ``btf`` with libbpf and with objbtf (1.1 and, unless told
    otherwise, upstream semantics); the tables must be the same."""
    raw = encode_btf(btf)
    base = btf.base
    theirs = parse_btf(libbpf_dedup(raw, base_raw), base)
    ours = dedup(btf, libbpf_1_1=True)
    assert_same_btf(ours, theirs)
    if upstream_too:
        assert_same_btf(dedup(btf), theirs)
    return ours


class Builder:
    """Hand-made type tables: each method adds one type, returns its id."""

    def __init__(self, base: Btf | None = None) -> None:
        self.btf = Btf(base=base)

    @property
    def next(self) -> int:
        return self.btf.next_id

    def add(self, kind: Kind, name: str = '', **fields) -> int:
        return self.btf.add(BtfType(kind, name, **fields))

    def int(self, name: str = 'int', size: int = 4, signed: bool = True) -> int:
        return self.add(Kind.INT, name, size=size, encoding=int(signed), bits=8 * size)

    def ptr(self, to: int) -> int:
        return self.add(Kind.PTR, type=to)

    def const(self, to: int) -> int:
        return self.add(Kind.CONST, type=to)

    def typedef(self, name: str, to: int) -> int:
        return self.add(Kind.TYPEDEF, name, type=to)

    def fwd(self, name: str, union: bool = False) -> int:
        return self.add(Kind.FWD, name, kflag=int(union))

    def struct(self, name: str, size: int, *members: tuple[str, int, int],
               union: bool = False) -> int:
        return self.add(Kind.UNION if union else Kind.STRUCT, name, size=size,
                        items=tuple(Member(n, t, off) for n, t, off in members))

    def enum(self, name: str, *values: tuple[str, int], size: int = 4) -> int:
        kind = Kind.ENUM64 if size == 8 else Kind.ENUM
        return self.add(kind, name, size=size,
                        items=tuple(Enumerator(n, v) for n, v in values))

    def array(self, elem: int, index: int, n: int) -> int:
        return self.add(Kind.ARRAY, type=elem, index_type=index, nelems=n)

    def proto(self, ret: int, *params: tuple[str, int]) -> int:
        return self.add(Kind.FUNC_PROTO, type=ret,
                        items=tuple(Param(n, t) for n, t in params))

    def func(self, name: str, proto: int, linkage: int = 1) -> int:
        return self.add(Kind.FUNC, name, type=proto, linkage=linkage)

    def var(self, name: str, to: int) -> int:
        return self.add(Kind.VAR, name, type=to, linkage=1)

    def datasec(self, name: str, *entries: tuple[int, int, int]) -> int:
        return self.add(Kind.DATASEC, name, size=sum(e[2] for e in entries),
                        items=tuple(VarSecinfo(*e) for e in entries))


# -- hand-made inputs ---------------------------------------------------------
# Each returns the table and the kind counts both libbpf and objbtf must
# reach; a comment tells what the case stresses.

def case_fwd_across_units() -> tuple[Btf, dict]:
    """libbpf's own example: A complete in one unit, B in the other, both
    with the other as a FWD; S everywhere."""
    b = Builder()
    # unit 1: struct A { int a; A *self; S *parent; }; struct B; struct S { A *, B * }
    i = b.int()
    a = b.next
    b.struct('A', 24, ('a', i, 0), ('self', a + 1, 64), ('parent', a + 2, 128))
    b.ptr(a)
    s = b.next + 1
    b.ptr(s)
    b.struct('S', 16, ('a_ptr', a + 1, 0), ('b_ptr', s + 2, 64))
    fb = b.fwd('B')
    b.ptr(fb)
    # unit 2: struct A; struct B { int b; B *self; S *parent; }; struct S
    i2 = b.int()
    fa = b.fwd('A')
    pa = b.ptr(fa)
    bb = b.next
    b.struct('B', 24, ('b', i2, 0), ('self', bb + 1, 64), ('parent', bb + 2, 128))
    b.ptr(bb)
    b.ptr(bb + 3)
    b.struct('S', 16, ('a_ptr', pa, 0), ('b_ptr', bb + 1, 64))
    return b.btf, {'INT': 1, 'PTR': 3, 'STRUCT': 3}


def case_fwd_only_through_pointer() -> tuple[Btf, dict]:
    """A FWD no struct graph reaches: the resolve_fwds pass maps it."""
    b = Builder()
    f = b.fwd('foo')
    b.var('some_global', b.ptr(f))
    i = b.int()
    foo = b.struct('foo', 4, ('u', i, 0))
    b.var('another_global', b.ptr(foo))
    return b.btf, {'INT': 1, 'PTR': 1, 'STRUCT': 1, 'VAR': 2}


def case_ambiguous_fwd() -> tuple[Btf, dict]:
    """Two different struct foo: a FWD foo stays a FWD."""
    b = Builder()
    i = b.int()
    b.struct('foo', 4, ('a', i, 0))
    lng = b.int('long', 8)
    b.struct('foo', 8, ('b', lng, 0))
    f = b.fwd('foo')
    b.var('p', b.ptr(f))
    return b.btf, {'FWD': 1, 'INT': 2, 'PTR': 1, 'STRUCT': 2, 'VAR': 1}


def case_union_fwd() -> tuple[Btf, dict]:
    """A union FWD (kflag) resolves to the union, inside a graph and alone;
    a struct FWD of a union's name does not."""
    b = Builder()
    uf = b.fwd('u', union=True)
    b.struct('holder', 8, ('p', b.next + 1, 0))
    b.ptr(uf)
    b.var('pv', b.ptr(b.fwd('v', union=True)))
    b.var('pw', b.ptr(b.fwd('w')))
    i = b.int()
    u = b.struct('u', 4, ('i', i, 0), ('c', i, 0), union=True)
    b.struct('holder', 8, ('p', b.next + 1, 0))
    b.ptr(u)
    b.struct('v', 4, ('i', i, 0), union=True)
    b.struct('w', 4, ('i', i, 0), union=True)
    return b.btf, {'FWD': 1, 'INT': 1, 'PTR': 3, 'STRUCT': 1, 'UNION': 3, 'VAR': 2}


def case_enums() -> tuple[Btf, dict]:
    """Enum forwards (ENUM, vlen 0) against full ENUMs and ENUM64s, before
    and after them; a forward met before two different full enums goes to
    the last one, as in libbpf."""
    b = Builder()
    e = b.enum('e')
    b.var('pe', b.ptr(e))
    b.enum('e', ('E_A', 1), ('E_B', 1 << 40), size=8)
    b.enum('f', ('F_A', 0), ('F_B', 1))
    b.var('pf', b.ptr(b.enum('f')))
    g = b.enum('g')
    b.var('pg', b.ptr(g))
    b.enum('g', ('G_A', 1))
    b.enum('g', ('G_A', 2))
    b.enum('f', ('F_A', 0), ('F_B', 1))
    b.add(Kind.ENUM, 'h', size=4, kflag=1, items=(Enumerator('H', -1),))
    b.add(Kind.ENUM, 'h', size=4, kflag=0, items=(Enumerator('H', 0xffffffff),))
    return b.btf, {'ENUM': 5, 'ENUM64': 1, 'PTR': 3, 'VAR': 3}


def case_name_conflicts() -> tuple[Btf, dict]:
    """Same name, different types: sizes differ, or only a member's type."""
    b = Builder()
    i = b.int()
    u = b.int('unsigned int', signed=False)
    f1 = b.struct('foo', 4, ('a', i, 0))
    f2 = b.struct('foo', 4, ('a', u, 0))
    f3 = b.struct('foo', 8, ('a', i, 0), ('b', i, 32))
    for f in (f1, f2, f3, f1):
        b.ptr(f)
    b.struct('foo', 4, ('a', b.int(), 0))
    return b.btf, {'INT': 2, 'PTR': 3, 'STRUCT': 3}


def case_recursive() -> tuple[Btf, dict]:
    """Self-referential and mutually recursive structs, three units, the
    last with b as a FWD."""
    b = Builder()
    for unit in range(3):
        i = b.int()
        lst = b.next
        b.struct('list', 16, ('next', lst + 1, 0), ('prev', lst + 1, 64))
        b.ptr(lst)
        sa = b.next
        b.struct('a', 16, ('pb', sa + 1, 0), ('x', i, 64))
        b.ptr(sa + 2)
        if unit == 2:
            b.fwd('b')
        else:
            b.struct('b', 24, ('pa', sa + 3, 0), ('l', lst, 64))
        b.ptr(sa)
    return b.btf, {'INT': 1, 'PTR': 3, 'STRUCT': 3}


def case_typedef_member() -> tuple[Btf, dict]:
    """struct s { int x; } and struct s { myint x; } with typedef int myint
    are different types; the typedef itself is shared."""
    b = Builder()
    i = b.int()
    b.struct('s', 4, ('x', b.typedef('myint', i), 0))
    i2 = b.int()
    b.struct('s', 4, ('x', i2, 0))
    b.typedef('myint', i2)
    b.struct('s', 4, ('x', b.typedef('myint', b.int()), 0))
    return b.btf, {'INT': 1, 'STRUCT': 2, 'TYPEDEF': 1}


def case_arrays_of_structs() -> tuple[Btf, dict]:
    """Arrays of structs and of pointers inside structs, in two units."""
    b = Builder()
    for _ in range(2):
        i = b.int()
        p = b.struct('point', 8, ('x', i, 0), ('y', i, 32))
        pts = b.array(p, i, 4)
        ptrs = b.array(b.ptr(p), i, 2)
        b.struct('shape', 52, ('pts', pts, 0), ('n', i, 256), ('refs', ptrs, 288))
        b.array(b.const(p), i, 3)
    return b.btf, {'ARRAY': 3, 'CONST': 1, 'INT': 1, 'PTR': 1, 'STRUCT': 2}


def case_func_protos() -> tuple[Btf, dict]:
    """Function prototypes: equal ones merge, other parameter names or a
    varargs marker keep them apart; FUNCs differ by name and linkage."""
    b = Builder()
    for _ in range(2):
        i = b.int()
        cs = b.ptr(b.const(b.int('char', 1)))
        f = b.proto(i, ('a', i), ('s', cs))
        b.func('f', f)
        b.func('g', f)
        b.func('h', b.proto(i, ('b', i), ('s', cs)))
        b.func('printf', b.proto(i, ('fmt', cs), ('', 0)))
        b.func('static_f', f, linkage=0)
        b.ptr(b.proto(0))
    return b.btf, {'CONST': 1, 'FUNC': 5, 'FUNC_PROTO': 4, 'INT': 2, 'PTR': 2}


def case_vars_and_datasecs() -> tuple[Btf, dict]:
    """VARs and DATASECs are never deduplicated, the types they use are."""
    b = Builder()
    for _ in range(2):
        i = b.int()
        x = b.var('x', i)
        y = b.var('y', b.ptr(i))
        b.datasec('.data..percpu', (x, 0, 4), (y, 8, 8))
    return b.btf, {'DATASEC': 2, 'INT': 1, 'PTR': 1, 'VAR': 4}


def case_duplicates_in_one_unit() -> tuple[Btf, dict]:
    """A unit that holds one type twice (compilers do this) against a unit
    that holds it once: the arrays merge in both libbpf versions, the
    pointers only upstream (see UPSTREAM_COUNTS)."""
    b = Builder()
    i = b.int()
    arr = b.array(i, i, 4)
    b.struct('t', 32, ('a', arr, 0), ('b', arr, 128))
    p = b.ptr(i)
    b.struct('s', 16, ('p', p, 0), ('q', p, 64))
    i2 = b.int()
    b.struct('t', 32, ('a', b.array(i2, i2, 4), 0), ('b', b.array(i2, i2, 4), 128))
    b.struct('s', 16, ('p', b.ptr(i2), 0), ('q', b.ptr(i2), 64))
    return b.btf, {'ARRAY': 1, 'INT': 1, 'PTR': 1, 'STRUCT': 3}


def case_typedef_of_ambiguous_fwd() -> tuple[Btf, dict]:
    """typedef struct foo foo_t, once on an ambiguous FWD, once on one of
    the two struct foo: libbpf 1.1 keeps two typedefs and the FWD; upstream
    compares typedefs as graphs and resolves the FWD to that struct."""
    b = Builder()
    i = b.int()
    b.struct('foo', 4, ('a', i, 0))
    b.struct('foo', 8, ('b', b.int('long', 8), 0))
    b.typedef('foo_t', b.fwd('foo'))
    b.typedef('foo_t', b.struct('foo', 4, ('a', b.int(), 0)))
    return b.btf, {'FWD': 1, 'INT': 2, 'STRUCT': 2, 'TYPEDEF': 2}


#: Kind counts upstream libbpf reaches where it differs from libbpf 1.1.
UPSTREAM_COUNTS = {
    'duplicates_in_one_unit': {'ARRAY': 1, 'INT': 1, 'PTR': 1, 'STRUCT': 2},
    'typedef_of_ambiguous_fwd': {'INT': 2, 'STRUCT': 2, 'TYPEDEF': 1},
}

CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith('case_')}


@pytest.mark.parametrize('name', sorted(CASES))
def test_hand_made(name):
    btf, counts = CASES[name]()
    ours = check(btf, upstream_too=name not in UPSTREAM_COUNTS)
    assert kind_counts(ours) == counts


@pytest.mark.parametrize('name', sorted(UPSTREAM_COUNTS))
def test_upstream_differences(name):
    btf, _ = CASES[name]()
    assert kind_counts(dedup(btf)) == UPSTREAM_COUNTS[name]


def test_split_on_base():
    """Split types equal to base types map to them; a split struct whose
    graph would resolve a base FWD stays apart (the base cannot change) but
    the base FWD's users in the split part get the struct; a split FWD
    resolves to a unique base struct."""
    b = Builder()
    i = b.int()
    foo = b.struct('foo', 16, ('x', i, 0), ('b', b.next + 2, 64))
    bar_fwd = b.fwd('bar')
    b.ptr(bar_fwd)
    b.ptr(foo)
    baz = b.struct('baz', 4, ('z', i, 0))
    base_raw = encode_btf(b.btf)
    base = parse_btf(base_raw)
    s = Builder(base)
    i2 = s.int()
    bar = s.struct('bar', 4, ('y', i2, 0))
    pbar = s.ptr(bar)
    s.struct('foo', 16, ('x', i2, 0), ('b', pbar, 64))
    s.var('uses_base_fwd', s.ptr(bar_fwd))
    s.var('split_fwd', s.ptr(s.fwd('baz')))
    s.ptr(s.int())
    s.struct('baz', 4, ('z', i2, 0))
    ours = check(s.btf, base_raw)
    assert ours.base is base and ours.start_id == base.next_id == 7
    assert [(t.kind.name, t.name, list(t.refs())) for _, t in ours.own()] == [
        ('STRUCT', 'bar', [i]), ('PTR', '', [7]), ('STRUCT', 'foo', [i, 8]),
        ('VAR', 'uses_base_fwd', [8]), ('PTR', '', [baz]), ('VAR', 'split_fwd', [11]),
        ('PTR', '', [i])]


def test_result_is_a_new_table():
    btf, _ = case_recursive()
    before = [t.key() for t in btf.types]
    out = dedup(btf)
    assert [t.key() for t in btf.types] == before
    assert not {id(t) for t in out.types[1:]} & {id(t) for t in btf.types}
    assert [t.key() for t in dedup(out).types] == [t.key() for t in out.types]


def renumbered(btf: Btf, order: list[int]) -> Btf:
    """``btf`` with its own types laid out in ``order`` (a permutation of
    their ids)."""
    new = {old: btf.start_id + k for k, old in enumerate(order)}
    out = Btf(base=btf.base)
    for old in order:
        t = btf[old].copy()
        t.remap(lambda i: new.get(i, i))
        out.add(t)
    return out


def test_isomorphism_check():
    """The oracle's comparison up to renumbering sees through a shuffle,
    and not through a changed member type."""
    btf, _ = case_fwd_across_units()
    out = dedup(btf)
    order = [i for i, _ in out.own()][::-1]
    shuffled = renumbered(out, order[1::2] + order[0::2])
    assert diff_btf(out, shuffled) is not None
    assert isomorphism_problem(out, shuffled) is None
    broken = renumbered(out, [i for i, _ in out.own()])
    b = next(t for _, t in broken.own() if t.name == 'B')
    self_ptr, parent_ptr = b.items[1].type, b.items[2].type
    b.items = (b.items[0], b.items[1]._replace(type=parent_ptr), b.items[2])
    assert self_ptr != parent_ptr and 'B' in isomorphism_problem(out, broken)


# -- compiled inputs ------------------------------------------------------------

def test_compiled_units(tmp_path):
    """The fixture units by gcc and clang, through pahole, concatenated."""
    units = pahole_units(tmp_path, UNITS)
    ours = check(concat(units))
    counts = kind_counts(ours)
    assert counts['DECL_TAG'] and counts['TYPE_TAG'] and counts['ENUM64']
    names = Counter((t.kind.name, t.name) for _, t in ours.own())
    assert names['STRUCT', 'list_head'] == names['STRUCT', 'list_node'] == 1
    assert names['FWD', 'opaque'] == 1 and names['FWD', 'device'] == 0
    # gcc writes `const volatile u32 *` as CONST -> VOLATILE, clang as
    # VOLATILE -> CONST, so struct node and what points to it come in
    # several versions (FWDs resolved differently in each); the 8-byte
    # struct device of unit_d stays one.
    assert names['STRUCT', 'node'] >= 2
    sizes = Counter(t.size for _, t in ours.own() if t.kind is Kind.STRUCT and t.name == 'device')
    assert sizes[8] == 1 and sizes[80] >= 2


def test_compiled_units_split(tmp_path):
    """gcc's units as base, clang's as split BTF on top of them."""
    units = pahole_units(tmp_path, UNITS)
    base_raw = encode_btf(dedup(concat(units[:len(UNITS)])))
    ours = check(concat(units[len(UNITS):], parse_btf(base_raw)), base_raw)
    assert len(ours) < sum(len(u) for u in units[len(UNITS):]) // 3


def test_split_on_undeduplicated_base(tmp_path):
    """A base that holds every type many times over: libbpf's table lists
    them per key in an order its growths keep reversing, and the split
    types must meet the same one first."""
    units = pahole_units(tmp_path, UNITS)
    base_raw = encode_btf(concat(units))
    for split_units in (units[:1], units[3:7]):
        check(concat(split_units, parse_btf(base_raw)), base_raw)


def grouped_kinds(base: Btf, legacy: bool, kinds: KindRegistry = KINDS) -> set[str]:
    """Checks that a base type's group, from its head alone, is the group
    its table key names (else a split type could miss it); the kinds of
    the types checked."""
    d = _Dedup(Btf(base=base), legacy, None, kinds)
    heads = d.base.heads
    seen = set()
    for i in range(1, base.next_id):
        group = d.classes.coarse_of_head[heads[i][0]]
        if group is not None:
            assert group(heads[i]) == d._coarse_of_key(d._base_key(i)), base[i]
            seen.add(heads[i][0].name)
    return seen


@pytest.mark.parametrize('legacy', [False, True])
def test_base_groups_agree_with_keys(tmp_path, legacy):
    units = pahole_units(tmp_path, UNITS)
    kinds = grouped_kinds(parse_btf(encode_btf(concat(units))), legacy)
    assert len(kinds) >= 14, kinds


class _OneKindsList:
    """``HeadsBase`` that gives one list of kinds every time, as a base index does."""

    def __init__(self, base: Btf):
        self.heads = HeadsBase(base)
        self.list = self.heads.kinds()

    def kinds(self) -> list[Kind]:
        return self.list

    def groups(self):
        return self.heads.groups()

    def composite(self, name: str) -> int | None:
        return self.heads.composite(name)


def test_split_dedup_refuses_a_base_type_of_kind_0_every_time():
    """libbpf cannot hash a base type of kind 0 (but void) and refuses the
    dedup; a process that dedups many modules on one base checks a base's
    kinds once it found them good, never lets a bad one through, and gives
    the same split BTF each time on a good one."""
    good = Btf(types=[VOID, BtfType(Kind.INT, 'int', size=4, encoding=1, bits=32)])
    bad = Btf(types=[*good.types, BtfType(Kind.UNKN)])
    bad_base = _OneKindsList(bad)
    for _ in range(2):
        with pytest.raises(BtfError, match='cannot deduplicate a type of kind UNKN'):
            dedup(Btf(types=[BtfType(Kind.PTR, type=1)], base=bad), split_base=bad_base)
    good = parse_btf(encode_btf(good))      # a split table's strings follow its base's
    good_base = _OneKindsList(good)
    outs = {encode_btf(dedup(Btf(types=[BtfType(Kind.PTR, type=1), BtfType(Kind.PTR, type=1)],
                                 base=good), split_base=good_base))
            for _ in range(2)}
    assert len(outs) == 1
    assert [t.kind for _, t in parse_btf(outs.pop(), base=good).own()] == [Kind.PTR]


def test_table_growth_points():
    """The growths ``_BaseCandidates`` assumes are those ``_Candidates`` makes."""
    table = _Candidates()
    seen = []
    for n in range(1, 5000):
        grows = table._grows
        table.add(n % 7, n)
        if table._grows != grows:
            seen.append(n)
    assert _growth_points(4999) == seen


# -- the reference kernel -------------------------------------------------------

def has_debug_info(path: Path) -> bool:
    with open(path, 'rb') as f:
        return ELFFile(f).get_section_by_name('.debug_info') is not None


def kernel_sample(build: Path, count: int) -> list[Path]:
    """``count`` objects with DWARF spread evenly over the sorted tree."""
    objs = [p for p in sorted(build.rglob('*.o'))
            if p.name != 'vmlinux.o' and not p.name.startswith('.') and has_debug_info(p)]
    assert len(objs) > 800, f'only {len(objs)} objects with DWARF in {build}'
    step = len(objs) / count
    return [objs[int(k * step)] for k in range(count)]


@pytest.fixture(scope='module')
def kernel_units(kernel_build) -> list[Btf]:
    need('pahole')
    build = kernel_build
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(pahole_btf, kernel_sample(build, 50)))


@pytest.mark.kernel
def test_kernel_objects(kernel_units):
    """50 kernel objects' BTF concatenated, as the vmlinux link sees it."""
    big = concat(kernel_units)
    ours = check(big)
    assert 5 * len(ours) < len(big)


@pytest.mark.kernel
def test_kernel_objects_split_on_vmlinux(kernel_units, kernel_build):
    """Ten objects' BTF as split BTF on vmlinux's: nearly all of it is
    already in the base."""
    with open(kernel_build / 'vmlinux', 'rb') as f:
        base_raw = ELFFile(f).get_section_by_name('.BTF').data()
    base = parse_btf(base_raw)
    split = concat(kernel_units[::5], base)
    ours = check(split, base_raw)
    assert 20 * len(ours) < len(split)


def test_oracle_is_libbpf_1_1():
    assert os.path.realpath(LIBBPF).endswith('libbpf.so.1.1.2'), os.path.realpath(LIBBPF)
