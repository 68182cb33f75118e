"""loader.py's types in C (objbtf/dwarf/_loader.c) against the Python loader.

In the compiled build, ``CuLoader.load_types`` runs in C; ``_load_types``
is its Python twin, which the pure-Python build runs and which takes over
wherever the C gives up (None).  Where the C runs, it must give what the Python gives: the same types, ids
and index type.  Where the Python raises, the C must give up or raise the
same error.  test_encode.py, test_kernel_objects.py and the link tests
compare the encoder's output (so, here, the C loader) with pahole's.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c
from kernel_tree import objects

import objbtf
from objbtf.btf.kinds import Kind
from objbtf.btf.types import Btf, gc_paused
from objbtf.dwarf import constants as C
from objbtf.dwarf import loader as loader_module
from objbtf.dwarf.loader import CuLoader
from objbtf.dwarf.reader import (
    ITEM_ATTRS, M_BYTE_SIZE, M_LOCATION, M_TYPE, P_ABSTRACT_ORIGIN,
    P_SPECIFICATION, Expr, read_units,
)
from objbtf.elf.reader import ElfFile
from objbtf.encode.encoder import _all_dies, debug_sections, has_dwarf
from objbtf.features import Features

_C = loader_module._C
FEATURES = Features()


@pytest.fixture(scope='module', autouse=True)
def c_loader():
    """objbtf.dwarf._loader, which the compiled build must have."""
    if _C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C loader: '
                    'install it compiled (scripts/install.sh)')


def units_of(path: Path) -> tuple[list, dict, str]:
    """The decoded units of an object, its DIEs by offset, its byte order
    (no units for an object without DWARF)."""
    with ElfFile.open(str(path)) as elf:
        units = read_units(debug_sections(elf)) if has_dwarf(elf) else []
        return units, _all_dies(units), elf.byteorder


def c_load(cu, dies: dict, btf: Btf):
    """What the C loader gives for one unit of ``btf``'s object: None, or
    (ids, types, index type)."""
    return _C.load_types(cu.dies, dies, btf.next_id, cu.address_size, btf.byteorder == 'big',
                         cu.annotated and FEATURES.type_tag, FEATURES)


def python_load(units: list, dies: dict, byteorder: str) -> tuple[list, list, list]:
    """The Python loader's keys of every type (void first), and each
    unit's ids and index type."""
    btf = Btf(byteorder=byteorder)
    ids, index_types = [], []
    for cu in units:
        loader = CuLoader(cu, btf, FEATURES, dies)
        loader._load_types()
        ids.append(loader.ids)
        index_types.append(loader.index_type)
    return [t.key() for t in btf.types], ids, index_types


def assert_same_load(units: list, dies: dict, byteorder: str, where: object) -> int:
    """The C loader gives the Python loader's types, ids and index types
    for every unit it does not give up on; the number it gave up on."""
    keys, ids, index_types = python_load(units, dies, byteorder)
    btf = Btf(byteorder=byteorder)
    gave_up = 0
    for i, cu in enumerate(units):
        start = btf.next_id
        made = c_load(cu, dies, btf)
        if made is None:
            gave_up += 1
            CuLoader(cu, btf, FEATURES, dies)._load_types()
            continue
        c_ids, types, index_type = made
        assert c_ids == ids[i], f'{where}: unit {i}: ids differ'
        assert index_type == index_types[i], f'{where}: unit {i}: index type'
        btf.types.extend(types)
        got = [t.key() for t in btf.types[start:]]
        assert got == keys[start:start + len(got)], f'{where}: unit {i}: types differ'
    assert [t.key() for t in btf.types] == keys, f'{where}: the tables differ'
    return gave_up


def test_every_object_of_the_kernel(kernel_build, kernel_sample):
    """Every object of the reference kernel (in the default tier, a sample:
    conftest.kernel_sample): the same types, and no give-up."""
    count = 0
    with gc_paused():
        for path in objects(kernel_build)[::kernel_sample]:
            units, dies, byteorder = units_of(path)
            assert assert_same_load(units, dies, byteorder, path) == 0, path
            count += bool(units)
    assert count > 500 // kernel_sample


FLAVOURS = {
    'gcc': ('gcc',),
    'gcc -gdwarf-4': ('gcc', '-gdwarf-4'),
    'clang': ('clang',),
    'arm64': ('aarch64-linux-gnu-gcc',),
    's390x (big-endian)': ('s390x-linux-gnu-gcc',),
    'i386': ('gcc', '-m32', '-D__int128=long long'),     # i386 has no __int128
}


@pytest.mark.parametrize('flavour', FLAVOURS)
def test_fixture_in_every_flavour(tmp_path, flavour):
    """kinds.c (bitfields of each width, packed structs, enums of each
    size and sign, arrays, function pointers) from each compiler and
    target the encoder reads: the C loader's table is the Python one's,
    bitfield offsets in both byte orders included."""
    compiler, *flags = FLAVOURS[flavour]
    obj = compile_c(compiler, C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o', *flags)
    units, dies, byteorder = units_of(obj)
    assert byteorder == ('big' if 's390x' in flavour else 'little')
    assert assert_same_load(units, dies, byteorder, flavour) == 0


def test_dwarf_2_member_locations_are_left_to_python(tmp_path):
    """DWARF 2 gives a member's offset as an expression (DW_OP_plus_uconst):
    the C gives up, and load_types gives the Python loader's table."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o', '-gdwarf-2')
    units, dies, byteorder = units_of(obj)
    assert any(isinstance(m[M_LOCATION], Expr) for d in dies.values() for m in d.items
               if m[0] == C.TAG_member), 'gcc -gdwarf-2 gave no expression locations'
    assert assert_same_load(units, dies, byteorder, '-gdwarf-2') == len(units)
    assert c_outcome(units, dies, byteorder) == python_load(units, dies, byteorder)[0]


def test_clangs_type_tags(tmp_path):
    """clang's btf_type_tag annotations of pointers (tags.c): the C loader
    chains the same TYPE_TAGs before each pointer, with the same ids, and
    leaves the decl tags to add_type_decl_tags, as _load_types does."""
    obj = compile_c('clang', C_FIXTURES / 'tags.c', tmp_path / 'tags.o')
    units, dies, byteorder = units_of(obj)
    assert all(cu.annotated for cu in units)
    keys = python_load(units, dies, byteorder)[0]
    assert sum(k[0] is Kind.TYPE_TAG for k in keys) >= 2, 'tags.c gave no type tags'
    assert assert_same_load(units, dies, byteorder, 'clang tags.c') == 0


def small_object(tmp_path: Path) -> tuple[list, dict, str]:
    return units_of(compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o'))


def python_outcome(units: list, dies: dict, byteorder: str):
    """The Python loader's keys, or the type of the error it raises."""
    try:
        return python_load(units, dies, byteorder)[0]
    except Exception as err:            # what the C must give up on, or raise too
        return type(err)


def c_outcome(units: list, dies: dict, byteorder: str):
    """As python_outcome, through load_types: the C, or the Python where it gives up."""
    btf = Btf(byteorder=byteorder)
    try:
        for cu in units:
            CuLoader(cu, btf, FEATURES, dies).load_types()
    except Exception as err:
        return type(err)
    return [t.key() for t in btf.types]


def test_a_reference_to_no_type_is_left_to_python(tmp_path):
    """A member whose type is a function DIE: the Python loader names it
    (LoadError); the C gives up instead of guessing."""
    units, dies, byteorder = small_object(tmp_path)
    function = next(off for off, d in dies.items() if d.tag == C.TAG_subprogram)
    struct = next(d for d in units[0].dies if d.tag == C.TAG_structure_type and d.items)
    member = list(struct.items[0])
    member[M_TYPE] = function
    struct.items = [tuple(member), *struct.items[1:]]
    assert c_load(units[0], dies, Btf(byteorder=byteorder)) is None
    assert python_outcome(units, dies, byteorder) is loader_module.LoadError
    assert c_outcome(units, dies, byteorder) is loader_module.LoadError


@pytest.mark.parametrize('reference', [P_SPECIFICATION, P_ABSTRACT_ORIGIN])
def test_a_parameter_named_through_another_die_is_left_to_python(tmp_path, reference):
    """A function type's parameter (an item) without a name or a type of
    its own, which a specification or an abstract origin gives (compilers
    write neither there): the C gives up, and the Python follows the
    reference as it does for a function's parameters (DIEs)."""
    units, dies, byteorder = small_object(tmp_path)
    proto = next(d for d in units[0].dies if d.tag == C.TAG_subroutine_type and d.items)
    origin = next(c for d in units[0].dies if d.tag == C.TAG_subprogram for c in d.children
                  if c.tag == C.TAG_formal_parameter and c.attrs.get(C.AT_name))
    param = [None] * (len(ITEM_ATTRS[C.TAG_formal_parameter]) + 2)
    param[0], param[-1] = C.TAG_formal_parameter, ()
    param[reference] = origin.offset
    proto.items = [tuple(param), *proto.items[1:]]
    assert c_load(units[0], dies, Btf(byteorder=byteorder)) is None
    keys = python_outcome(units, dies, byteorder)
    assert c_outcome(units, dies, byteorder) == keys
    loader = CuLoader(units[0], Btf(byteorder=byteorder), FEATURES, dies)
    loader._load_types()
    [name, type_id] = loader.params(proto)[0]
    assert (name, type_id) == (origin.attrs[C.AT_name], loader.ids[origin.attrs[C.AT_type]])


#: Values a mutation puts in place of a DIE's attribute or a member's field.
ODD_VALUES = (None, 0, 1, 3, 7, 64, -1, 2**31, 2**40, 2**63, 2**70, -2**63, True, b'\x23\x04',
              'int', Expr(0, b'\x23\x08'), Expr(0, b''))


def mutate(units: list, dies: dict, rng: random.Random) -> None:
    """Put an odd value in one attribute of a type DIE, or in one field of
    a member, or among its children, or point a reference elsewhere."""
    type_dies = [d for d in units[0].dies if d.attrs]
    die = rng.choice(type_dies)
    offsets = list(dies)
    if rng.random() < 0.05:
        die.children = [*die.children, rng.choice(ODD_VALUES)]      # no Die among them
        return
    if die.items and rng.random() < 0.5:
        items = list(die.items)
        j = rng.randrange(len(items))
        item = list(items[j])
        field = rng.randrange(1, min(len(item), M_BYTE_SIZE + 1))
        item[field] = rng.choice(offsets) if field == M_TYPE else rng.choice(ODD_VALUES)
        items[j] = tuple(item)
        die.items = items
        return
    attr = rng.choice([C.AT_name, C.AT_type, C.AT_byte_size, C.AT_encoding, C.AT_declaration,
                       C.AT_upper_bound, C.AT_count, C.AT_specification, C.AT_const_value])
    attrs = dict(die.attrs)
    if attr in (C.AT_type, C.AT_specification) and rng.random() < 0.7:
        attrs[attr] = rng.choice(offsets)
    else:
        attrs[attr] = rng.choice(ODD_VALUES)
    die.attrs = attrs


def test_damaged_dies_give_the_python_outcome(tmp_path):
    """2,000 copies of kinds.c's DIEs (gcc) and of tags.c's (clang, with
    type tags), each with one odd value or reference:
    through load_types (the C, and the Python where it gives up) the same
    table as the Python loader, or the same error.  Most of them the C
    loads itself (a different table, or an error), not giving up."""
    rng = random.Random(20261128)
    objs = [compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o'),
            compile_c('clang', C_FIXTURES / 'tags.c', tmp_path / 'tags.o')]
    outcomes = {'same table': 0, 'same error': 0, 'C gave up': 0}
    for case in range(2000):
        units, dies, byteorder = units_of(objs[case % 2])
        mutate(units, dies, rng)
        expected = python_outcome(units, dies, byteorder)
        try:
            outcomes['C gave up'] += c_load(units[0], dies, Btf(byteorder=byteorder)) is None
        except Exception:
            pass                        # its error is compared below
        assert c_outcome(units, dies, byteorder) == expected
        outcomes['same error' if isinstance(expected, type) else 'same table'] += 1
    # 20261128 gives about 1,830 tables, 170 errors, and 90 give-ups of the C.
    assert outcomes['same table'] > 100 and outcomes['same error'] > 100, outcomes
    assert 0 < outcomes['C gave up'] < 1000, outcomes
