"""The per-object passes in C (objbtf/btf/_blob.c) against the Python ones.

The compiled build writes an object's types into the blob, then hashes
and checks them on it, in C.  The blob must be the Python writer's, byte
for byte, with the same offsets, wherever the C writer writes one; where
the Python writer raises, the C writer leaves it to it.  The hashes must be what ``type_hashes`` gives
for the model: the same hash and flags for every type id.  The check may
refuse what ``first_problem`` accepts (then the Python check runs), never
the other way round: every blob it accepts must have a model in which
``first_problem`` finds nothing.  Where the C code gives up (a kind it does
not know, a name outside the string section, a reference chain deeper than
its stack) the Python code decides.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c
from fixtures.btf import inputs
from test_validate import ACCEPTED, REJECTED, field_mutations, mutated

import objbtf
from objbtf.btf import hashing, validate
from objbtf.btf.errors import BtfError
from objbtf.btf.hashing import UNMERGEABLE, blob_hashes, type_hashes
from objbtf.btf.kinds import KINDS, Kind, KindRegistry
from objbtf.btf.reader import parse_btf
from objbtf.btf.types import (
    Btf, BtfType, Enumerator, Member, Param, VarSecinfo, gc_paused,
)
from objbtf.btf.validate import first_problem, first_problem_of_blob
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile
from objbtf.encode.object_file import _encode
from objbtf.features import Features

#: Compiler and flags: both compilers, 32-bit, big-endian, and GCC's own BTF.
VARIANTS = {
    'gcc': ('gcc', '-gdwarf-5'),
    'gcc-m32': ('gcc', '-m32', '-gdwarf-5'),
    'gcc-s390x': ('s390x-linux-gnu-gcc', '-gdwarf-4'),
    'gcc-gbtf': ('gcc', '-gbtf'),
    'clang': ('clang', '-gdwarf-5'),
    'clang-s390x': ('clang', '--target=s390x-linux-gnu', '-gdwarf-5'),
}
SOURCES = ('kinds.c', 'scopes.c', 'tags.c', 'declared_enums.c')


@pytest.fixture(scope='module')
def c_passes():
    """objbtf.btf._blob, which the compiled build must have."""
    if hashing._C is None or validate._C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C passes: '
                    'install it compiled (scripts/install.sh)')
    return hashing._C


@pytest.fixture(scope='module')
def c_hashes(c_passes):
    return c_passes.hashes


@pytest.fixture(scope='module')
def c_accepts(c_passes):
    return c_passes.accepts


#: The kernel's kinds in a registry of their own: ``encode_btf`` writes
#: with the C writer only for ``KINDS`` itself, so this takes the Python one.
PYTHON_WRITER_KINDS = KindRegistry(KINDS.infos)


def python_blob(btf: Btf, offsets: list[int] | None = None, byteorder: str | None = None) -> bytes:
    return encode_btf(btf, offsets, byteorder, kinds=PYTHON_WRITER_KINDS)


def assert_python_writes(btf: Btf, raw: bytes, what: object) -> None:
    """``raw``, which the compiled build wrote, is the Python writer's blob
    of ``btf``, in both byte orders, with the same type offsets."""
    assert raw == python_blob(btf), what
    for byteorder in ('little', 'big'):
        ours: list[int] = []
        python: list[int] = []
        assert encode_btf(btf, ours, byteorder) == python_blob(btf, python, byteorder), what
        assert ours == python, what


def assert_same_hashes(c_hashes, btf: Btf, raw: bytes, what: object) -> None:
    ours = c_hashes(raw, btf.byteorder == 'big')
    assert ours is not None, f'{what}: the C hashing gave up'
    hashes, flags = type_hashes(btf)
    assert list(ours[0]) == hashes, what
    assert bytes(ours[1]) == bytes(flags), what


def assert_object_passes(c_passes, path: Path) -> bool:
    """Whether ``path`` had BTF to encode; if so, the C hashes are the
    model's, and the C check accepts it, as the model's does."""
    with ElfFile.open(str(path)) as elf:
        encoded = _encode(elf, Features(), str(path))
        ptr_size = elf.pointer_size
    if encoded is None:
        return False
    assert_python_writes(encoded.btf, encoded.raw, path)
    assert_same_hashes(c_passes.hashes, encoded.btf, encoded.raw, path)
    assert first_problem(encoded.btf, ptr_size=ptr_size) is None
    assert c_passes.accepts(encoded.raw, encoded.btf.byteorder == 'big', ptr_size), path
    return True


BUILDS = [(v, s) for v in VARIANTS for s in SOURCES if (v, s) != ('gcc-m32', 'kinds.c')]


@pytest.mark.parametrize('variant, source', BUILDS)
def test_c_passes_on_compiled_objects(c_passes, tmp_path, variant, source):
    compiler, *flags = VARIANTS[variant]
    out = compile_c(compiler, C_FIXTURES / source, tmp_path / 'out.o', *flags)
    assert assert_object_passes(c_passes, out)


def test_c_passes_on_every_kernel_object(c_passes, kernel_build, kernel_sample):
    """Every object of the reference kernel with DWARF (gcc, DWARF 5; in the
    default tier, a sample: conftest.kernel_sample)."""
    objects = 0
    with gc_paused():
        for path in sorted(kernel_build.rglob('*.o'))[::kernel_sample]:
            objects += assert_object_passes(c_passes, path)
    assert objects > 800 // kernel_sample


def table(*types: BtfType, byteorder: str = 'little') -> Btf:
    btf = Btf(byteorder=byteorder)
    for t in types:
        btf.add(t)
    return btf


def every_field_table(byteorder: str) -> Btf:
    """Every kind, with the fields each can set at values that differ in
    how they print (negative, 64 bits, kind_flag's meanings), and cycles
    through unnamed types, which flag every type on them."""
    return table(
        BtfType(Kind.INT, 'int', 4, encoding=1, bits=32),                       # 1
        BtfType(Kind.INT, 'u3', 1, bit_offset=2, bits=3),                        # 2
        BtfType(Kind.PTR, type=4),                                               # 3: a cycle
        BtfType(Kind.CONST, type=3),                                             # 4
        BtfType(Kind.STRUCT, 'bits', 8, kflag=1, items=(
            Member('a', 2, 0, 3), Member('b', 1, 32, 0), Member('', 6, 0))),     # 5
        BtfType(Kind.UNION, '', 8, items=(Member('x', 1, 0), Member('p', 3, 0))),  # 6
        BtfType(Kind.ENUM, 'e', 4, kflag=1, items=(
            Enumerator('NEG', -5), Enumerator('MAX', 2**31 - 1))),               # 7
        BtfType(Kind.ENUM, 'u', 4, items=(Enumerator('TOP', 2**32 - 1),)),       # 8
        BtfType(Kind.ENUM64, 'w', 8, kflag=1, items=(Enumerator('MIN', -2**63),)),  # 9
        BtfType(Kind.ENUM64, 'uw', 8, items=(Enumerator('UMAX', 2**64 - 1),)),   # 10
        BtfType(Kind.FWD, 'fu', kflag=1),                                        # 11
        BtfType(Kind.FWD, 'fs'),                                                 # 12
        BtfType(Kind.ARRAY, type=11, index_type=1, nelems=7),                    # 13
        BtfType(Kind.FUNC_PROTO, type=1, items=(Param('a', 13), Param('', 0))),  # 14
        BtfType(Kind.FUNC, 'f', type=14, linkage=1),                             # 15
        BtfType(Kind.VAR, 'v', type=5, linkage=1),                               # 16
        BtfType(Kind.DATASEC, '.data', 16, items=(VarSecinfo(16, 0, 8),)),       # 17
        BtfType(Kind.DECL_TAG, 'tag', type=15, component_idx=-1),                # 18
        BtfType(Kind.DECL_TAG, 'tag', type=15, component_idx=0),                 # 19
        BtfType(Kind.TYPE_TAG, 'user', type=1),                                  # 20
        BtfType(Kind.TYPEDEF, 'naïve_t', type=20),                               # 21
        BtfType(Kind.VOLATILE, type=22),                                         # 22: its own
        BtfType(Kind.RESTRICT, type=3),                                          # 23
        BtfType(Kind.FLOAT, 'double', 8),                                        # 24
        byteorder=byteorder)


@pytest.mark.parametrize('byteorder', ['little', 'big'])
def test_c_writer_on_every_kind_and_field(c_passes, byteorder):
    btf = every_field_table(byteorder)
    assert c_passes.write(btf.types, byteorder == 'big') is not None
    assert_python_writes(btf, encode_btf(btf), byteorder)


#: BtfType's attributes, in its constructor's order.
TYPE_FIELDS = ('kind', 'name', 'size', 'type', 'kflag', 'encoding', 'bit_offset', 'bits',
               'index_type', 'nelems', 'linkage', 'component_idx', 'items')


class SlotsType:
    """A type with BtfType's attributes in the slots of a Python class."""
    __slots__ = TYPE_FIELDS

    def __init__(self, t: BtfType):
        for field in TYPE_FIELDS:
            SlotsType.__dict__[field].__set__(self, getattr(t, field))


class RenamedType(SlotsType):
    """Its name a property over its base's slot."""
    __slots__ = ()

    @property
    def name(self) -> str:
        return 'renamed'


class LookupType(SlotsType):
    """A class whose attribute lookup is its own."""
    __slots__ = ()

    def __getattribute__(self, field: str):
        value = object.__getattribute__(self, field)
        return 'looked up' if field == 'name' else value


@pytest.mark.parametrize('strict', [False, True])
def test_c_writer_reads_attributes_as_getattr_does(c_passes, strict):
    """The C writer reads a type's attributes through the descriptors of
    the first type's class, found once: types of other classes, a property
    in a subclass and a class with its own lookup still read as getattr
    reads them."""
    btf = every_field_table('little')

    def write(types: list) -> tuple | None:
        return c_passes.write([btf.types[0], *types], False, strict)

    ours = btf.types[1:]
    expected = write(ours)
    assert expected is not None
    assert write([SlotsType(t) for t in ours]) == expected
    assert write([t if i % 2 else SlotsType(t) for i, t in enumerate(ours)]) == expected
    assert write([SlotsType(t) if i % 2 else t for i, t in enumerate(ours)]) == expected
    for cls, name in ((RenamedType, 'renamed'), (LookupType, 'looked up')):
        named = [t.copy() for t in ours]
        for t in named:
            t.name = name
        assert write([cls(t) for t in ours]) == write(named), cls
        assert write([SlotsType(ours[0]), *[cls(t) for t in ours[1:]]]) \
            == write([ours[0], *named[1:]]), cls


def test_c_writer_lays_out_strings_as_python_does(c_passes):
    """Names by their text, whatever object holds it: first use decides
    the offset, '' is 0, and text that differs only past a NUL, or only
    in a character outside ASCII, is another string."""
    rng = random.Random(5)
    texts = ['', 'é', 'e', 'a\0b', 'a\0c', 'a', *[f'n{i}' for i in range(3000)]]
    types = []
    for n in range(6000):
        text = rng.choice(texts)
        name = ''.join(list(text))      # the same text, mostly another object
        types.append(BtfType(Kind.STRUCT, name, 4, items=(
            Member(''.join(list(rng.choice(texts))), 0, 0),)))
    btf = table(*types)
    assert c_passes.write(btf.types, False) is not None
    assert_python_writes(btf, encode_btf(btf), 'names')


@pytest.mark.parametrize('byteorder', ['little', 'big'])
def test_c_hashes_of_every_kind_and_field(c_hashes, byteorder):
    btf = every_field_table(byteorder)
    assert_same_hashes(c_hashes, btf, encode_btf(btf), byteorder)
    _, flags = type_hashes(btf)
    # The table does what it says: cycles flag, and VAR and DATASEC are flagged.
    assert [i for i in (3, 4, 16, 17, 22) if flags[i] & UNMERGEABLE] == [3, 4, 16, 17, 22]


def chain(length: int) -> Btf:
    """Unnamed pointers, each to the next: as deep as the hashing can nest."""
    return table(*[BtfType(Kind.PTR, type=i + 1) for i in range(1, length)],
                 BtfType(Kind.INT, 'int', 4, bits=32))


def damaged_names(raw: bytes) -> bytes:
    """``raw`` with its first type's name offset past the string section."""
    first = 24                      # the header's length; the types follow it
    return raw[:first] + (0xffffff).to_bytes(4, 'little') + raw[first + 4:]


@pytest.mark.parametrize('damage', ['deep', 'names', 'kind'])
def test_where_the_c_hashes_give_up_python_hashes(c_hashes, damage):
    """None from C, and blob_hashes gives the model's hashes all the same."""
    if damage == 'deep':
        btf = chain(300)
        raw = encode_btf(btf)
        assert c_hashes(raw, False) is None
        assert blob_hashes(btf, raw) == type_hashes(btf)
        assert c_hashes(encode_btf(chain(200)), False) is not None
        return
    raw = encode_btf(every_field_table('little'))
    if damage == 'names':
        raw = damaged_names(raw)
    else:                           # the first type's kind, 20: none the kernel knows
        info = int.from_bytes(raw[28:32], 'little')
        raw = raw[:28] + (info & ~(0x1f << 24) | 20 << 24).to_bytes(4, 'little') + raw[32:]
    assert c_hashes(raw, False) is None


# -- the writer: the Python writer's bytes, or the Python writer's error -------

#: Values the model's int fields may hold that the format's may not.
UNFIT = [-1, -2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, -2**63, 2**64, 2**70, 0x10000,
         0x1000000, 255, 256]
NAMES = ['', 'x', 'a\0b', '\udcff', 'é', 'x' * 600]
FIELDS = [*TYPE_FIELDS, 'item']


def unfit_mutation(rng: random.Random, t: BtfType) -> None:
    """Set one field of ``t`` (or of one of its entries) to a value the
    format may not hold, a name that is not UTF-8, a kind the kernel does
    not know, or entries of the wrong shape."""
    field = rng.choice(FIELDS)
    if field == 'name':
        t.name = rng.choice(NAMES)
    elif field == 'kind':
        t.kind = rng.choice([*Kind, 20, -1])
    elif field == 'items':
        t.items = rng.choice([(), (1, 2), (('x', 1),), tuple(t.items) * 40000])
    elif field == 'item' and t.items and all(isinstance(e, tuple) for e in t.items):
        items = list(t.items)
        i = rng.randrange(len(items))
        entry = list(items[i])
        j = rng.randrange(len(entry))
        entry[j] = rng.choice(NAMES) if isinstance(entry[j], str) else rng.choice(UNFIT)
        items[i] = tuple(entry[:-1] if rng.random() < 0.1 else entry)
        t.items = tuple(items)
    elif field != 'item':
        setattr(t, field, rng.choice(UNFIT))


def test_c_writer_on_random_unfit_fields(c_passes):
    """The zoo with one to three fields the format may not hold: the C
    writer writes the Python writer's bytes, or, where the Python writer
    raises, gives up (and encode_btf raises the Python writer's error)."""
    rng = random.Random(11)
    written = refused = 0
    for n in range(3000):
        btf, _ = inputs.zoo()
        for _ in range(rng.choice([1, 1, 2, 3])):
            unfit_mutation(rng, btf.types[rng.randrange(1, len(btf.types))])
        byteorder = rng.choice(['little', 'big'])
        try:
            python = python_blob(btf, None, byteorder)
        except Exception as err:            # noqa: BLE001 (any error the writer raises)
            refused += 1
            assert c_passes.write(btf.types, byteorder == 'big') is None, f'#{n}: {err}'
            with pytest.raises(type(err), match='^' + re.escape(str(err)) + '$'):
                encode_btf(btf, None, byteorder)
            continue
        written += 1
        assert encode_btf(btf, None, byteorder) == python, f'#{n}'
    assert written > 1000 and refused > 300, (written, refused)


# -- the check: never accepting what the Python check refuses ------------------

def c_verdict(c_accepts, btf: Btf, raw: bytes) -> bool:
    return c_accepts(raw, btf.byteorder == 'big', 8)


@pytest.mark.parametrize('name', sorted(REJECTED))
def test_c_check_refuses_every_broken_rule(c_accepts, name):
    """tests/test_validate.py's rules broken one at a time, which the kernel refuses."""
    btf = mutated(REJECTED[name])
    raw = encode_btf(btf)
    assert first_problem(btf, ptr_size=8) is not None
    assert not c_verdict(c_accepts, btf, raw)
    assert first_problem_of_blob(btf, raw, 8) == first_problem(btf, ptr_size=8)


def ascii_names(btf: Btf) -> bool:
    return all(t.name.isascii() and all(not isinstance(e[0], str) or e[0].isascii()
                                        for e in t.items) for _, t in btf.own())


@pytest.mark.parametrize('name', sorted(ACCEPTED))
def test_c_check_accepts_the_near_misses(c_accepts, name):
    """tests/test_validate.py's near misses, which the kernel accepts: the C
    check takes every one whose names are ASCII (others are Python's)."""
    btf = mutated(ACCEPTED[name])
    assert first_problem(btf, ptr_size=8) is None
    assert c_verdict(c_accepts, btf, encode_btf(btf)) == ascii_names(btf)


def test_c_check_on_random_field_mutations(c_accepts):
    """One or two fields of the zoo's types set to interesting values: what
    the C check accepts, the Python check accepts too, and the C check
    takes most of what the Python one does."""
    both = python_only = 0
    for tried, btf in enumerate(field_mutations(random.Random(7), 4000), 1):
        python = first_problem(btf, ptr_size=8) is None
        c = c_verdict(c_accepts, btf, encode_btf(btf))
        assert python or not c, f'case {tried}: C accepts, Python finds ' \
            f'{first_problem(btf, ptr_size=8)}'
        both += python and c
        python_only += python and not c
    assert both > 4 * python_only, (both, python_only)


def byte_mutations(rng: random.Random, raw: bytes, count: int):
    """``count`` copies of ``raw`` with one to three bytes changed past its header."""
    for _ in range(count):
        out = bytearray(raw)
        for _ in range(rng.choice([1, 1, 2, 3])):
            pos = rng.randrange(24, len(out))
            out[pos] = rng.choice([0, 1, 0x7f, 0x80, 0xff, out[pos] ^ 1 << rng.randrange(8)])
        yield bytes(out)


@pytest.mark.parametrize('source', ['zoo', 'kernel/fork.o'])
def test_c_check_on_random_byte_mutations(c_accepts, kernel_build, source):
    """What the C check accepts parses, and the Python check finds nothing in it."""
    if source == 'zoo':
        raw = encode_btf(inputs.zoo()[0])
    else:
        with ElfFile.open(str(kernel_build / source)) as elf:
            raw = _encode(elf, Features(), source).raw
    rng = random.Random(source)
    accepted = 0
    for n, blob in enumerate(byte_mutations(rng, raw, 1500)):
        if not c_accepts(blob, False, 8):
            continue
        accepted += 1
        try:
            btf = parse_btf(blob)
        except BtfError as err:
            pytest.fail(f'#{n}: C accepts a blob that does not parse: {err}')
        assert first_problem(btf, ptr_size=8) is None, f'#{n}: C accepts, Python finds ' \
            f'{first_problem(btf, ptr_size=8)}'
    assert accepted > 100
