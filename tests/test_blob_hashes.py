"""The type hashes in C (objbtf/btf/_blob.c) against hashing.py's.

The compiled build hashes an object's types from the blob the writer made
of them, in C, and must give what ``type_hashes`` gives for the model: the
same hash and flags for every type id.  Where the C code gives up (a kind it
does not know, a name outside the string section, a reference chain deeper
than its stack) it returns None and ``blob_hashes`` hashes the model.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c

import objbtf
from objbtf.btf import hashing
from objbtf.btf.hashing import UNMERGEABLE, blob_hashes, type_hashes
from objbtf.btf.kinds import Kind
from objbtf.btf.types import (
    Btf, BtfType, Enumerator, Member, Param, VarSecinfo, gc_paused,
)
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile
from objbtf.encode_file import _encode
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
def c_hashes():
    """The C hashing, which the compiled build must have."""
    if hashing._C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C type hashes: '
                    'install it compiled (scripts/install.sh)')
    return hashing._C.hashes


def assert_same_hashes(c_hashes, btf: Btf, raw: bytes, what: object) -> None:
    ours = c_hashes(raw, btf.byteorder == 'big')
    assert ours is not None, f'{what}: the C hashing gave up'
    hashes, flags = type_hashes(btf)
    assert list(ours[0]) == hashes, what
    assert bytes(ours[1]) == bytes(flags), what


def assert_object_hashes(c_hashes, path: Path) -> bool:
    """Whether ``path`` had BTF to encode; if so, the C hashes are the model's."""
    with ElfFile.open(str(path)) as elf:
        encoded = _encode(elf, Features(), str(path))
    if encoded is None:
        return False
    assert_same_hashes(c_hashes, encoded.btf, encoded.raw, path)
    return True


BUILDS = [(v, s) for v in VARIANTS for s in SOURCES if (v, s) != ('gcc-m32', 'kinds.c')]


@pytest.mark.parametrize('variant, source', BUILDS)
def test_c_hashes_are_the_models_hashes(c_hashes, tmp_path, variant, source):
    compiler, *flags = VARIANTS[variant]
    out = compile_c(compiler, C_FIXTURES / source, tmp_path / 'out.o', *flags)
    assert assert_object_hashes(c_hashes, out)


def test_c_hashes_of_every_kernel_object(c_hashes, kernel_build):
    """Every object of the reference kernel with DWARF (gcc, DWARF 5)."""
    objects = 0
    with gc_paused():
        for path in sorted(kernel_build.rglob('*.o')):
            objects += assert_object_hashes(c_hashes, path)
    assert objects > 800


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
