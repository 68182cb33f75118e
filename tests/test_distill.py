"""Distilled base BTF (``.BTF.base``): the link's distill pass
(linkdedup/distill.py, libbpf's ``btf__distill_base()``) and the relocation
the kernel's module loader does (objbtf/btf/distilled.py, ``btf_relocate()``).

First on small tables built by hand, one rule each: which base types the
distilled base keeps and how, which move into the split BTF and in what
order, how the ids are renumbered, and what the relocation needs (names,
sizes, the embedded-struct rule, one candidate each).  Then through
``objbtf link --btf-features default,distilled_base`` on compiled units:
the .BTF.base section, libbpf (Debian's bpftool) loading the split BTF on
it, the relocation onto the module's own base and onto another one, and
the newest pahole's .BTF.base and .BTF for the same module, compared.
The kernel's own relocation is the boot test's (test_boot.py).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, need, objbtf, run
from libbpf_oracle import isomorphism_problem
from linkdedup.distill import DistillError, distill, reached_base_types
from objbtf.btf import Btf, BtfType, Enumerator, Kind, Member, Param, parse_btf
from objbtf.btf.distilled import (RelocationError, base_map, check_distilled_base,
                                  embedded_ids, relocate)
from objbtf.btf.header import BtfHeader
from objbtf.btf.types import VOID
from objbtf.btf.writer import encode_btf
from objbtf.btf_file import load_btf_file
from objbtf.elf.reader import ElfFile
from objbtf.inspect.diff import diff_btf

K = Kind


def t(kind: Kind, name: str = '', **fields) -> BtfType:
    return BtfType(kind, name, **fields)


def member(name: str, type_id: int, bit_offset: int = 0) -> Member:
    return Member(name, type_id, bit_offset, 0)


def vmlinux_like(*, embedded_size: int = 24, extra: tuple[BtfType, ...] = ()) -> Btf:
    """A base as vmlinux's: each kind a module may name, and some it may
    not.  ``extra`` goes first (other ids for everything else)."""
    n = len(extra)

    def i(k: int) -> int:
        return k + n
    types = [VOID, *extra,
             t(K.INT, 'int', size=4, encoding=1, bits=32),                          # 1
             t(K.INT, 'unsigned int', size=4, bits=32),                             # 2
             t(K.FLOAT, 'double', size=8),                                          # 3
             t(K.STRUCT, 'list_head', size=16,
               items=(member('next', i(5)), member('prev', i(5), 64))),             # 4
             t(K.PTR, type=i(4)),                                                   # 5
             t(K.TYPEDEF, 'u32', type=i(2)),                                        # 6
             t(K.ENUM, 'state', size=4, items=(Enumerator('ON', 0), Enumerator('OFF', 1))),  # 7
             t(K.ENUM64, 'big', size=8, items=(Enumerator('HUGE', 1 << 40),)),      # 8
             t(K.FWD, 'opaque'),                                                    # 9
             t(K.STRUCT, size=8, items=(member('x', i(6)), member('y', i(1), 32))),  # 10
             t(K.ENUM, size=4, items=(Enumerator('ANON_A', 0),)),                  # 11
             t(K.FUNC_PROTO, type=i(1), items=(Param('h', i(5)),)),                 # 12
             t(K.FUNC, 'base_fn', type=i(12), linkage=1),                           # 13
             t(K.VAR, 'base_var', type=i(1), linkage=1),                            # 14
             t(K.STRUCT, 'embedded_me', size=embedded_size,
               items=(member('l', i(4)), member('n', i(1), 128))),                  # 15
             t(K.ARRAY, type=i(1), index_type=i(1), nelems=4),                      # 16
             t(K.CONST, type=i(15)),                                                # 17
             t(K.TYPE_TAG, 'user', type=i(1)),                                      # 18
             t(K.UNION, 'u', size=8, items=(member('a', i(1)), member('b', i(3)))),  # 19
             t(K.FWD, 'fu', kflag=1),                                               # 20
             t(K.TYPEDEF, 'anon_t', type=i(10)),                                    # 21
             t(K.INT, 'long', size=8, encoding=1, bits=64),                         # 22
             t(K.STRUCT, 'pointed', size=40, items=(member('q', i(22)),)),          # 23
             ]
    return Btf(types)


#: The module's own types, on vmlinux_like() (ids from 24).
def module_types() -> list[BtfType]:
    return [
        t(K.STRUCT, 'mod', size=120, items=(
            member('l', 4), member('p', 25, 128), member('e', 17, 192),
            member('st', 7, 384), member('b', 8, 448), member('a', 21, 512),
            member('arr', 16, 576), member('tag', 26, 704), member('ae', 11, 768),
            member('un', 19, 832))),                                                # 24
        t(K.PTR, type=9),                                                           # 25
        t(K.PTR, type=18),                                                          # 26
        t(K.FUNC_PROTO, type=0, items=(Param('m', 28), Param('h', 5), Param('pp', 30))),  # 27
        t(K.PTR, type=24),                                                          # 28
        t(K.FUNC, 'mod_fn', type=27, linkage=1),                                    # 29
        t(K.PTR, type=31),                                                          # 30
        t(K.CONST, type=23),                                                        # 31
        t(K.PTR, type=20),                                                          # 32
        t(K.FUNC_PROTO, type=3, items=(Param('f', 32),)),                           # 33
        t(K.FUNC, 'mod_fn2', type=33),                                              # 34
    ]


def module(base: Btf) -> Btf:
    return Btf(module_types(), base=base)


def shape(btf: Btf, type_id: int, seen: frozenset = frozenset()) -> tuple:
    """What ``type_id`` is, ids aside: a named INT, FLOAT, FWD, STRUCT,
    UNION, ENUM or ENUM64 of the base by its kind, name and size (what a
    distilled base keeps of it; an ENUM64 as an ENUM), anything else with its fields and the
    shapes of the types it names."""
    x = btf[type_id]
    if type_id == 0:
        return ('void',)
    if type_id < btf.start_id and x.name and x.kind in (K.INT, K.FLOAT, K.FWD, K.STRUCT,
                                                        K.UNION, K.ENUM, K.ENUM64):
        return ('ENUM' if x.kind is K.ENUM64 else x.kind.name, x.name, x.size)
    if type_id in seen:
        return ('cycle', x.kind.name, x.name)
    inner = seen | {type_id}
    return (x.kind.name, x.name, x.size, x.kflag, x.encoding, x.bit_offset, x.bits, x.nelems,
            x.linkage, x.component_idx, tuple(_without_ids(x, e) for e in x.items),
            tuple(shape(btf, r, inner) for r in x.refs()))


def _without_ids(x: BtfType, entry: tuple) -> tuple:
    """An entry of ``x`` without the type id it holds (``shape`` follows it)."""
    if x.kind in (K.STRUCT, K.UNION, K.FUNC_PROTO):
        return (entry[0], *entry[2:])
    return tuple(entry[1:]) if x.kind is K.DATASEC else tuple(entry)


def shapes(split: Btf, count: int) -> list[tuple]:
    """The shapes of the first ``count`` own types of ``split``."""
    return [shape(split, split.start_id + k) for k in range(count)]


# --- the distilled base and the split BTF ------------------------------------

def test_reached_base_types_stop_at_named_structs_and_unions():
    split = module(vmlinux_like())
    reached = reached_base_types(split)
    # list_head (4) is reached, its PTR (5) only through the prototype's
    # parameter, not through list_head's members; the anonymous struct (10)
    # through anon_t, and on to u32 and unsigned int; pointed (23) but not
    # its member's long (22); never the FUNC, VAR or the unused types.
    assert reached == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 16, 17, 18, 19, 20, 21, 23]


def test_the_distilled_base_keeps_what_the_kernel_finds_by_name():
    base = vmlinux_like()
    dist, split = distill(module(base))
    assert [(x.kind, x.name, x.size, x.kflag, x.encoding, x.bits, x.items)
            for _, x in dist.own()] == [
        (K.INT, 'int', 4, 0, 1, 32, ()),
        (K.INT, 'unsigned int', 4, 0, 0, 32, ()),
        (K.FLOAT, 'double', 8, 0, 0, 0, ()),
        (K.STRUCT, 'list_head', 16, 0, 0, 0, ()),     # empty, with its size
        (K.ENUM, 'state', 4, 0, 0, 0, ()),
        (K.ENUM, 'big', 8, 0, 0, 0, ()),              # ENUM64 as an ENUM of its size
        (K.FWD, 'opaque', 0, 0, 0, 0, ()),
        (K.STRUCT, 'embedded_me', 24, 0, 0, 0, ()),
        (K.UNION, 'u', 8, 0, 0, 0, ()),
        (K.FWD, 'fu', 0, 1, 0, 0, ()),
        (K.STRUCT, 'pointed', 40, 0, 0, 0, ()),
    ]
    check_distilled_base(dist)
    assert split.base is dist and split.start_id == 12


def test_the_split_btf_is_the_module_s_types_then_the_moved_ones_in_base_order():
    base = vmlinux_like()
    own = module(base)
    dist, split = distill(own)
    n = len(own)
    assert [x.key()[:2] for _, x in split.own()][:n] == [x.key()[:2] for _, x in own.own()]
    moved = [(x.kind, x.name) for _, x in split.own()][n:]
    assert moved == [(K.PTR, ''), (K.TYPEDEF, 'u32'), (K.STRUCT, ''), (K.ENUM, ''),
                     (K.ARRAY, ''), (K.CONST, ''), (K.TYPE_TAG, 'user'), (K.TYPEDEF, 'anon_t')]
    # The anonymous struct and enum move whole, with their members.
    anon = split[split.start_id + n + 2]
    assert [m.name for m in anon.items] == ['x', 'y'] and split[anon.items[0].type].name == 'u32'
    assert [e.name for e in split[split.start_id + n + 3].items] == ['ANON_A']
    # Every reference is renumbered onto the distilled base or the new split ids.
    assert split.dangling() is None
    assert split[split.start_id].items[0].type == 4                 # list_head, distilled id 4
    assert split[split[split.start_id + 1].type].name == 'opaque'


def test_each_type_is_what_it_was_with_base_types_by_name():
    base = vmlinux_like()
    own = module(base)
    _, split = distill(own)
    assert shapes(split, len(own)) == shapes(own, len(own))


def test_a_module_cannot_name_a_function_or_variable_of_the_base():
    base = vmlinux_like()
    for bad in (13, 14):
        types = module_types() + [t(K.DECL_TAG, 'tag', type=bad, component_idx=-1)]
        with pytest.raises(DistillError, match=rf'base type \[{bad}\], a (FUNC|VAR)'):
            distill(Btf(types, base=base))


def test_a_module_without_base_types_gets_an_empty_distilled_base():
    base = vmlinux_like()
    own = Btf([t(K.INT, 'own', size=2, bits=16), t(K.PTR, type=24)], base=base)
    dist, split = distill(own)
    assert len(dist) == 0 and split.start_id == 1
    assert [x.type for _, x in split.own()] == [0, 1]
    raw = encode_btf(dist)
    assert parse_btf(raw).strings.data == b'\0'


# --- the relocation: the kernel's rules --------------------------------------

def test_relocation_onto_the_same_base_gives_back_the_module():
    base = vmlinux_like()
    own = module(base)
    _, split = distill(own)
    back = relocate(split, base)
    assert back.start_id == own.start_id
    assert shapes(back, len(own)) == shapes(own, len(own))
    # Named base types are the base's own again; the moved ones are copies.
    assert back[own.start_id].items[0].type == 4


def test_relocation_onto_another_build_of_the_base():
    base = vmlinux_like()
    _, split = distill(module(base))
    extra = (t(K.INT, 'char', size=1, encoding=2, bits=8),
             t(K.STRUCT, 'other', size=4, items=(member('c', 1),)),
             t(K.FWD, 'list_head'))     # no candidate for an embedded struct: another size
    other = vmlinux_like(extra=extra)
    back = relocate(split, other)
    assert back.start_id == other.next_id
    mapped = base_map(split, other)
    assert [other[mapped[i]].name for i in range(1, len(split.base) + 1)] == \
        [x.name for _, x in split.base.own()]
    assert mapped[4] == 4 + len(extra)                  # list_head the struct, not the FWD
    assert shapes(back, len(module_types())) == shapes(module(base), len(module_types()))


def test_an_embedded_struct_must_keep_its_size():
    """embedded_me is inside struct mod (through a CONST): another size
    refuses the module; a struct only pointed to may change size."""
    _, split = distill(module(vmlinux_like()))
    assert {split.base[i].name for i in embedded_ids(split)} == {'list_head', 'embedded_me', 'u'}
    with pytest.raises(RelocationError, match="'embedded_me'.*matches no type"):
        relocate(split, vmlinux_like(embedded_size=32))
    bigger = vmlinux_like()
    bigger[23].size = 48                                # 'pointed', through a pointer
    relocate(split, bigger)


def test_an_embedded_struct_finds_one_type_of_its_name():
    """As the kernel does, a FWD of an embedded struct's name before the
    struct is no candidate (its size differs), one after it a second
    candidate: the size counts only until the struct is mapped."""
    _, split = distill(module(vmlinux_like()))
    relocate(split, vmlinux_like(extra=(t(K.FWD, 'list_head'),)))
    after = vmlinux_like()
    after.types.append(t(K.FWD, 'list_head'))
    with pytest.raises(RelocationError, match="'list_head'.*more than one candidate"):
        relocate(split, after)


def test_a_base_without_a_type_of_the_module_is_named(built, tmp_path):
    """objbtf check on a base that lacks a type the module names: the
    type, and exit status 1, as the kernel refuses it."""
    ko = linked_module(built, tmp_path, 'distilled_base')
    lacking = tmp_path / 'lacking.btf'
    objbtf('link', '--output', lacking, built / 'unit_e.o')
    r = objbtf('check', '--base', lacking, ko, check=False)
    assert r.returncode == 1 and 'matches no type of the base' in r.stderr, r.stderr


def test_same_named_structs_are_told_apart_by_size():
    base = vmlinux_like()
    _, split = distill(module(base))
    twin = t(K.STRUCT, 'pointed', size=8, items=(member('z', 1),))
    other = vmlinux_like(extra=(twin,))
    mapped = base_map(split, other)
    pointed = next(i for i, x in split.base.own() if x.name == 'pointed')
    assert other[mapped[pointed]].size == 40
    same = vmlinux_like(extra=(t(K.STRUCT, 'pointed', size=40),))
    with pytest.raises(RelocationError, match="'pointed'.*more than one candidate"):
        relocate(split, same)


def test_enums_fwds_and_ints_match_by_their_rules():
    _, split = distill(module(vmlinux_like()))
    # ENUM64 'big' was distilled to an ENUM of 8 bytes: an ENUM64 of 8 takes it.
    relocate(split, vmlinux_like())
    for at, wrong in ((8, t(K.ENUM64, 'big', size=4)),                  # other size
                      (2, t(K.INT, 'unsigned int', size=4, encoding=1, bits=32)),  # signed
                      (20, t(K.FWD, 'fu')),                             # a struct's FWD
                      (3, t(K.STRUCT, 'double', size=8))):              # another kind
        base = vmlinux_like()
        base.types[at] = wrong
        with pytest.raises(RelocationError, match=f"'{wrong.name}'.*matches no type"):
            relocate(split, base)


def test_a_distilled_base_holds_named_types_of_its_kinds_only():
    for bad, what in ((t(K.TYPEDEF, 'x', type=1), 'TYPEDEF'),
                      (t(K.STRUCT, size=4), 'anonymous')):
        dist = Btf([VOID, t(K.INT, 'int', size=4, bits=32), bad])
        with pytest.raises(RelocationError, match=what):
            check_distilled_base(dist)


# --- through objbtf link --------------------------------------------------------

UNITS = FIXTURES / 'dedup'


@pytest.fixture(scope='module')
def built(tmp_path_factory) -> Path:
    """tests/fixtures/dedup's units: unit_b and unit_c linked as a base
    (base.btf), unit_a and unit_d as a module (mod.o, not yet linked);
    unit_e, clang's, makes another base (other.btf: other ids)."""
    out = tmp_path_factory.mktemp('distill')
    objs = {}
    for name, cc in (('unit_a', 'gcc'), ('unit_b', 'gcc'), ('unit_c', 'gcc'),
                     ('unit_d', 'gcc'), ('unit_e', 'clang')):
        need(cc)
        objs[name] = out / f'{name}.o'
        objbtf('cc', '--', cc, '-g', '-O2', '-c', '-o', objs[name], UNITS / f'{name}.c')
    run(need('ld'), '-r', '-o', out / 'base.o', objs['unit_b'], objs['unit_c'])
    objbtf('link', '--output', out / 'base.btf', out / 'base.o')
    run('ld', '-r', '-o', out / 'other.o', objs['unit_e'], objs['unit_c'], objs['unit_b'])
    objbtf('link', '--output', out / 'other.btf', out / 'other.o')
    run('ld', '-r', '-o', out / 'mod.o', objs['unit_a'], objs['unit_d'])
    return out


def linked_module(built: Path, tmp_path: Path, *features: str) -> Path:
    ko = tmp_path / 'mod.ko'
    shutil.copyfile(built / 'mod.o', ko)
    objbtf('link', '--btf-features', ','.join(('default', *features)), '--base',
           built / 'base.btf', ko)
    return ko


def section(path: Path, name: str) -> bytes | None:
    with ElfFile.open(str(path)) as elf:
        sec = elf.section_by_name(name)
        return None if sec is None else elf.section_data(sec)


def test_the_link_writes_btf_base_beside_btf(built, tmp_path):
    ko = linked_module(built, tmp_path, 'distilled_base')
    dist_raw, split_raw = section(ko, '.BTF.base'), section(ko, '.BTF')
    dist = parse_btf(dist_raw)
    check_distilled_base(dist)
    assert {x.name for _, x in dist.own()} >= {'list_head', 'int', 'handle', 'opaque'}
    split = parse_btf(split_raw, dist)
    # The split BTF names the distilled base's strings only by their names.
    assert set(dist.strings.data.split(b'\0')[:-1]) == \
        {b''} | {x.name.encode() for _, x in dist.own()}
    # libbpf (Debian's bpftool) loads the split BTF on the distilled base.
    (tmp_path / 'dist.btf').write_bytes(dist_raw)
    (tmp_path / 'split.btf').write_bytes(split_raw)
    dump = run(need('bpftool'), 'btf', 'dump', '-B', tmp_path / 'dist.btf', 'file',
               tmp_path / 'split.btf').stdout
    assert dump.count('\n[') + 1 == len(split) and "FUNC 'd_find'" in dump
    assert objbtf('check', '--base', tmp_path / 'dist.btf', tmp_path / 'split.btf').returncode == 0
    # Read as the kernel loads it: relocated onto the base, and checked there.
    assert objbtf('check', '--base', built / 'base.btf', ko).returncode == 0
    assert objbtf('check', ko).returncode == 0           # on its distilled base


def test_relocated_the_module_has_its_types(built, tmp_path):
    """On its own base and on another one, the module relocated has the
    types, functions and variables of its plain split BTF; what it has
    more are the named base types that moved into it (typedefs)."""
    distilled = linked_module(built, tmp_path, 'distilled_base')
    (tmp_path / 'plain').mkdir()
    plain = linked_module(built, tmp_path / 'plain')
    assert section(plain, '.BTF.base') is None
    on_base = load_btf_file(str(plain), load_btf_file(str(built / 'base.btf')))
    for on in ('base.btf', 'other.btf'):
        base = load_btf_file(str(built / on))
        base_names = {(x.kind.name, x.name) for _, x in base.own()}
        report = diff_btf(on_base, load_btf_file(str(distilled), base))
        for part, entries in report.items():
            assert entries.removed == [] and entries.changed == [], (on, part)
            assert [e for e in entries.added if (e.get('kind'), e['name']) not in base_names] \
                == [], (on, part)
        assert report['types'].added                    # u32, u64: typedefs of the base


def test_distilled_base_is_for_a_module_linked_in_place(built, tmp_path):
    ko = tmp_path / 'mod.ko'
    shutil.copyfile(built / 'mod.o', ko)
    before = ko.read_bytes()
    r = objbtf('link', '--btf-features', 'default,distilled_base', '--base', built / 'base.btf',
               '--output', tmp_path / 'out.btf', ko, check=False)
    assert r.returncode == 1 and 'without --output' in r.stderr
    assert ko.read_bytes() == before and not (tmp_path / 'out.btf').exists()
    # vmlinux's link (no --base) has no base to distill: the feature changes nothing.
    for features in ('default', 'default,distilled_base'):
        objbtf('link', '--btf-features', features, '--output', tmp_path / f'{features}.btf',
               built / 'base.o')
    assert (tmp_path / 'default.btf').read_bytes() == \
        (tmp_path / 'default,distilled_base.btf').read_bytes()


def test_the_same_btf_base_as_the_newest_pahole(built, tmp_path, newest_pahole):
    """The newest pahole (libbpf's btf__distill_base) on the same module
    and base: the same distilled base, type for type, and the same split
    BTF up to the order of its own types.  The module is unit_d alone: on unit_a the newest pahole's dedup
    leaves copies of base types in the split BTF (as stock_btf.py says of
    7.x), which then reach other base types."""
    ours, theirs = tmp_path / 'ours.ko', tmp_path / 'pahole.ko'
    for ko in (ours, theirs):
        shutil.copyfile(built / 'unit_d.o', ko)
    objbtf('link', '--btf-features', 'default,distilled_base', '--base', built / 'base.btf', ours)
    run(newest_pahole, '-J', '--btf_features=default,distilled_base', '--btf_base',
        built / 'base.btf', theirs)
    dist = [parse_btf(section(p, '.BTF.base')) for p in (ours, theirs)]
    assert len(dist[0]) >= 4
    assert [x.key() for _, x in dist[0].own()] == [x.key() for _, x in dist[1].own()]
    split = [parse_btf(section(p, '.BTF'), d) for p, d in zip((ours, theirs), dist)]
    assert isomorphism_problem(split[0], split[1]) is None
    assert not any(diff_btf(split[1], split[0]).values())


# --- libbpf's own btf__distill_base and the kernel's btf_relocate -------------

def plain_split(built: Path, tmp_path: Path, objects: tuple[str, ...]) -> tuple[bytes, bytes]:
    """(base.btf, the module of ``objects``' split BTF on it, linked without
    distilled_base)."""
    ko = tmp_path / 'plain.ko'
    run('ld', '-r', '-o', ko, *[built / f'{o}.o' for o in objects])
    objbtf('link', '--base', built / 'base.btf', ko)
    return (built / 'base.btf').read_bytes(), section(ko, '.BTF')


@pytest.mark.parametrize('objects', [('unit_a', 'unit_d'), ('unit_d',), ('unit_a',)])
def test_the_same_distilled_base_and_split_as_libbpf(built, tmp_path, newest_libbpf, objects):
    """libbpf's btf__distill_base on the module's plain split BTF gives what
    objbtf's link writes with distilled_base: the same types under the same
    ids, the same type and string sections byte for byte."""
    base, split = plain_split(built, tmp_path, objects)
    theirs_base, theirs_split = newest_libbpf.distill(base, split)
    ko = tmp_path / 'distilled.ko'
    run('ld', '-r', '-o', ko, *[built / f'{o}.o' for o in objects])
    objbtf('link', '--btf-features', 'default,distilled_base', '--base', built / 'base.btf', ko)
    ours_base, ours_split = section(ko, '.BTF.base'), section(ko, '.BTF')
    dist = [parse_btf(ours_base), parse_btf(theirs_base)]
    assert [x.key() for _, x in dist[0].own()] == [x.key() for _, x in dist[1].own()]
    mine, libbpf = parse_btf(ours_split, dist[0]), parse_btf(theirs_split, dist[1])
    assert [x.key() for _, x in mine.own()] == [x.key() for _, x in libbpf.own()]
    # The same sections byte for byte (the newest libbpf's header is longer).
    assert sections_of(ours_base) == sections_of(theirs_base)
    assert sections_of(ours_split) == sections_of(theirs_split)


def sections_of(raw: bytes) -> tuple[bytes, bytes]:
    """The type and string sections of a raw BTF blob."""
    h = BtfHeader.read(raw)
    return bytes(h.types(raw)), bytes(h.strings(raw))


@pytest.mark.parametrize('onto', ['base.btf', 'other.btf', 'lacking'])
def test_the_same_relocation_as_the_kernel_s(built, tmp_path, newest_libbpf, onto):
    """objbtf's relocation (what dump, check and diff read) against the
    kernel's btf_relocate (libbpf's btf__relocate) of the same module, onto
    its own base, another one, and one that lacks its types (refused by
    both)."""
    ko = linked_module(built, tmp_path, 'distilled_base')
    dist_raw, split_raw = section(ko, '.BTF.base'), section(ko, '.BTF')
    if onto == 'lacking':
        objbtf('link', '--output', tmp_path / 'lacking.btf', built / 'unit_e.o')
        target = tmp_path / 'lacking.btf'
    else:
        target = built / onto
    base = load_btf_file(str(target))
    theirs = newest_libbpf.relocate(dist_raw, split_raw, target.read_bytes())
    on_dist = parse_btf(split_raw, parse_btf(dist_raw))
    if theirs is None:
        with pytest.raises(RelocationError):
            relocate(on_dist, base)
        return
    ours = relocate(on_dist, base)
    assert [x.key() for _, x in ours.own()] == \
        [x.key() for _, x in parse_btf(theirs, base).own()]
