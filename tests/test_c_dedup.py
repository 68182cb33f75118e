"""dedup.py's passes in C (objbtf/btf/_dedup.c) against the Python ones.

In the compiled build, ``dedup`` of base BTF of the kernel's kinds with
upstream libbpf's rules (every object's encode, the vmlinux link) writes
the model strictly (``_blob.write(..., strict=True)``: only a blob that
reads back as the model) and runs the passes on it in C; the Python code
compacts by the map they leave.  That map must be the Python passes' map
wherever the C code runs; where the Python passes raise, the C code must
give up, and ``dedup`` raise the Python error.  test_dedup.py compares
``dedup`` (so, here, the C passes) with libbpf itself.
"""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from conftest import C_FIXTURES, FIXTURES, compile_c
from fixtures.btf import inputs
from test_blob_passes import BUILDS, VARIANTS, unfit_mutation

import objbtf
from objbtf.btf import dedup as dedup_module
from objbtf.btf.dedup import _Dedup, _map_in_c, dedup, dedup_blob
from objbtf.btf.kinds import KINDS, Kind
from objbtf.btf.types import Btf, BtfType, Member, Param, gc_paused
from objbtf.btf.writer import encode_btf
from objbtf.compiler_btf.loader import load_compiler_btf
from objbtf.elf.reader import ElfFile
from objbtf.encode.encoder import BTF_SECTION, _add_datasecs, has_dwarf, load_dwarf
from objbtf.features import Features

FEATURES = Features()
UNITS = sorted((FIXTURES / 'dedup').glob('unit_*.c'))
CHAIN = {Kind.PTR, Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.FUNC,
         Kind.TYPE_TAG}


@pytest.fixture(scope='module', autouse=True)
def c_dedup():
    """objbtf.btf._dedup, which the compiled build must have."""
    if dedup_module._C_DEDUP is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C passes: '
                    'install it compiled (scripts/install.sh)')


def python_map(btf: Btf) -> list[int]:
    """The map the Python passes leave on ``btf``."""
    d = _Dedup(btf, False, None, KINDS)
    d.prim_types()
    d.struct_types()
    d.resolve_fwds()
    d.ref_types()
    return d.map


def python_blob(btf: Btf) -> tuple[bytes, list[int], list[int]]:
    """What ``dedup_blob`` must give: the blob of the Python passes'
    result, its types' offsets and its DATASECs' positions."""
    out = _Dedup(btf, False, None, KINDS).run(False)
    offsets: list[int] = []
    raw = encode_btf(out, offsets)
    return raw, offsets, [i for i, h in enumerate(out.heads()) if h[0] is Kind.DATASEC]


def assert_same_map(btf: Btf, what: object) -> None:
    """The C passes run on ``btf`` and agree with the Python ones."""
    assert verdict(btf, what) == 'same', f'{what}: the C passes gave up'


def verdict(btf: Btf, what: object) -> str:
    """'same' (the C passes' map and blob are the Python passes'), 'gave
    up' (where the Python passes do not raise), or 'raised' (the Python
    passes; the C ones gave up, and ``dedup`` raises as they do)."""
    ours = _map_in_c(btf)
    try:
        theirs = python_map(btf)
    except Exception as err:            # noqa: BLE001 (whatever the passes raise)
        assert ours is None and dedup_blob(btf) is None, \
            f'{what}: the Python passes raised {err!r}'
        with pytest.raises(type(err)):
            dedup(btf)
        return 'raised'
    if ours is None:
        return 'gave up'
    assert ours == theirs, what
    assert dedup_blob(btf) == python_blob(btf), what
    return 'same'


def object_table(path: Path) -> Btf | None:
    """The types of an object as its encode dedups them (the compiler's
    BTF, else its DWARF, with the DATASECs), or None when it has none."""
    with ElfFile.open(str(path)) as elf:
        sec = elf.section_by_name(BTF_SECTION)
        if sec is not None and sec.size:
            loaded = load_compiler_btf(elf, elf.section_data(sec), FEATURES)
        elif has_dwarf(elf):
            loaded = load_dwarf(elf, FEATURES)
        else:
            return None
        _add_datasecs(loaded.btf, elf, loaded.entries)
        return loaded.btf


def concat(tables: list[Btf]) -> Btf:
    """One table of all of ``tables``' types, as the vmlinux link has them."""
    out = Btf()
    for table in tables:
        shift = out.next_id - 1
        for _, t in table.own():
            c = t.copy()
            c.remap(lambda i: i + shift if i else 0)
            out.add(c)
    return out


# -- what compilers make ------------------------------------------------------

@pytest.mark.parametrize('variant, source', BUILDS)
def test_c_map_on_compiled_objects(tmp_path, variant, source):
    compiler, *flags = VARIANTS[variant]
    table = object_table(compile_c(compiler, C_FIXTURES / source, tmp_path / 'out.o', *flags))
    assert table is not None
    assert_same_map(table, (variant, source))


@pytest.fixture(scope='module')
def unit_tables(tmp_path_factory) -> list[Btf]:
    """The dedup fixture's units by gcc and by clang."""
    tmp = tmp_path_factory.mktemp('units')
    tables = []
    for compiler in ('gcc', 'clang'):
        for src in UNITS:
            out = compile_c(compiler, src, tmp / f'{src.stem}.{compiler}.o', '-Wno-attributes')
            table = object_table(out)
            assert table is not None
            tables.append(table)
    return tables


def test_c_map_on_units_together(unit_tables):
    """Each unit, and all of them in one table: structs met in several
    versions, forwards resolved across units."""
    for n, table in enumerate(unit_tables):
        assert_same_map(table, n)
    together = concat(unit_tables)
    assert_same_map(together, 'together')
    assert len(dedup(together)) < len(together) // 2


@pytest.fixture(scope='module')
def kernel_tables(kernel_build) -> list[Btf]:
    with gc_paused():
        tables = [object_table(p) for p in sorted(kernel_build.rglob('*.o'))
                  if p.name != 'vmlinux.o']
    return [t for t in tables if t is not None]


def test_c_map_on_every_kernel_object(kernel_tables):
    """Every object of the reference kernel with DWARF."""
    assert len(kernel_tables) > 800
    with gc_paused():
        for n, table in enumerate(kernel_tables):
            assert_same_map(table, n)


def test_c_dedup_of_kernel_objects_together(kernel_tables):
    """Every tenth object in one table, as the vmlinux link dedups them:
    the same map and blob, and ``dedup`` gives the Python passes' table."""
    together = concat(kernel_tables[::10])
    assert_same_map(together, 'together')
    ours = dedup(together)
    assert encode_btf(ours) == python_blob(together)[0]
    assert 4 * len(ours) < len(together)


# -- damaged graphs and fields ---------------------------------------------------

def chain_loop(btf: Btf, start: int, target: int) -> bool:
    """Whether pointing chain type ``start`` at ``target`` closes a loop
    of chain types (a PTR to itself): the Python passes would never end."""
    seen = 0
    while 0 <= target < len(btf.types) and btf.types[target].kind in CHAIN:
        if target == start or seen > len(btf.types):
            return True
        target = btf.types[target].type
        seen += 1
    return False


def rewire(rng: random.Random, btf: Btf) -> None:
    """One change to the graph: a reference moved (now and then past the
    last type), a name taken from another type, an enum made a forward, a
    forward's kind switched, or a struct copied."""
    n = len(btf.types)
    i = rng.randrange(1, n)
    t = btf.types[i]
    target = rng.randrange(n) if rng.random() < 0.97 else n + rng.randrange(3)
    what = rng.random()
    if what < 0.15:
        t.name = btf.types[rng.randrange(n)].name
    elif what < 0.25 and t.kind in (Kind.STRUCT, Kind.UNION):
        btf.add(t.copy())
    elif t.kind in (Kind.STRUCT, Kind.UNION) and t.items:
        items = list(t.items)
        j = rng.randrange(len(items))
        items[j] = Member(items[j][0], target, items[j][2], items[j][3])
        t.items = tuple(items)
    elif t.kind is Kind.FUNC_PROTO and t.items and what < 0.6:
        items = list(t.items)
        j = rng.randrange(len(items))
        items[j] = Param(items[j][0], target)
        t.items = tuple(items)
    elif t.kind is Kind.ARRAY and what < 0.6:
        t.index_type = target
    elif t.kind in (Kind.ENUM, Kind.ENUM64):
        t.items = ()
    elif t.kind is Kind.FWD:
        t.kflag ^= 1
    elif t.kind not in CHAIN or not chain_loop(btf, i, target):
        t.type = target


def test_c_map_on_rewired_graphs(kernel_tables, unit_tables):
    """Objects' tables with one to eight changes to their graphs: the C
    passes give the Python passes' map, or give up; and give up wherever
    the Python passes raise."""
    rng = random.Random(5)
    sources = [inputs.zoo()[0], concat(unit_tables), *kernel_tables[::150]]
    verdicts = Counter()
    for n in range(1500):
        btf = concat([rng.choice(sources)])
        for _ in range(rng.randint(1, 8)):
            rewire(rng, btf)
        verdicts[verdict(btf, f'#{n}')] += 1
    assert verdicts['same'] > 1000 and verdicts['raised'] > 20, verdicts


def test_c_map_on_random_unfit_fields():
    """The zoo with one to three fields the format may not hold (or that
    the blob would not give back): the C passes give the Python passes'
    map, or give up; ``dedup`` raises the Python error where they raise."""
    rng = random.Random(12)
    verdicts = Counter()
    for n in range(3000):
        btf, _ = inputs.zoo()
        for _ in range(rng.choice([1, 1, 2, 3])):
            unfit_mutation(rng, btf.types[rng.randrange(1, len(btf.types))])
        verdicts[verdict(btf, f'#{n}')] += 1
    assert verdicts['same'] > 1000 and verdicts['gave up'] > 300, verdicts


def test_pointer_loops_met_twice_in_one_walk():
    """Two pointers to themselves that one canonical pointer meets in
    the same walk: the check that they are the same type follows their
    targets, where libbpf's would loop for ever.  Both passes end: the
    walk finds them different, and the reference pass refuses the loop
    (the C passes give up, and dedup raises the Python error)."""
    btf = Btf()
    loop = btf.add(BtfType(Kind.PTR, type=1))
    btf.add(BtfType(Kind.STRUCT, 's', size=16, items=(Member('a', loop, 0),
                                                      Member('b', loop, 64))))
    first = btf.add(BtfType(Kind.PTR, type=3))
    second = btf.add(BtfType(Kind.PTR, type=4))
    btf.add(BtfType(Kind.STRUCT, 's', size=16, items=(Member('a', first, 0),
                                                      Member('b', second, 64))))
    assert (loop, first, second) == (1, 3, 4)
    assert verdict(btf, 'loops') == 'raised'


def test_fields_the_blob_would_not_give_back():
    """Values the writer would write but the reader give back otherwise
    (a bitfield size without kind_flag, an enum value out of its
    signedness's range, a kind_flag of 2, a linkage on a pointer): the
    strict writer refuses them, so two types that differ only there are
    never taken for one."""
    def zoo_with(index_name: str, change) -> Btf:
        btf, ids = inputs.zoo()
        change(btf.types[ids[index_name]])
        return btf

    def set_member_bits(t: BtfType) -> None:
        t.items = (Member(t.items[0][0], t.items[0][1], t.items[0][2], 3), *t.items[1:])

    cases = {
        'bits without kind_flag': zoo_with('legacy', set_member_bits),
        'unsigned enum value below 0': zoo_with('color', lambda t: setattr(
            t, 'items', ((t.items[0][0], -1), *t.items[1:]))),
        'kind_flag 2': zoo_with('myint', lambda t: setattr(t, 'kflag', 2)),
        'pointer linkage': zoo_with('char_ptr', lambda t: setattr(t, 'linkage', 1)),
    }
    for what, btf in cases.items():
        assert dedup_module._C_BLOB.write(btf.types, False) is not None, what
        assert dedup_module._C_BLOB.write(btf.types, False, True) is None, what
        assert _map_in_c(btf) is None, what
