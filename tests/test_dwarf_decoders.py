"""The DWARF decoder in C (objbtf/dwarf/_dies.c) against reader.py's.

The compiled build decodes .debug_info in C and must give the units that
``decode_units``, the Python decoder, gives: the same DIEs kept, with the
same attributes, values and value types, children and tables.  Where the C
decoder gives up (damaged sections, forms it does not take) it returns None
and ``read_units`` decodes in Python, with the Python decoder's error.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c, nested_unions

import objbtf
from objbtf.btf.types import gc_paused
from objbtf.dwarf import reader
from objbtf.dwarf.reader import CompileUnit, DebugSections, Die, DwarfError, decode_units
from objbtf.elf.reader import ElfFile
from objbtf.encode.encoder import debug_sections, has_dwarf

#: Compiler and flags: both DWARF versions, both compilers' forms (clang's
#: DWARF 5 indexes strings and location lists), 32-bit and big-endian.
VARIANTS = {
    'gcc-dwarf4': ('gcc', '-gdwarf-4'),
    'gcc-dwarf5': ('gcc', '-gdwarf-5'),
    'gcc-m32': ('gcc', '-m32', '-gdwarf-5'),
    'gcc-s390x': ('s390x-linux-gnu-gcc', '-gdwarf-4'),
    'gcc-aarch64': ('aarch64-linux-gnu-gcc', '-gdwarf-5'),
    'clang-dwarf4': ('clang', '-gdwarf-4'),
    'clang-dwarf5': ('clang', '-gdwarf-5'),
    'clang-s390x': ('clang', '--target=s390x-linux-gnu', '-gdwarf-5'),
}

#: Enumerators at both ends of 64 bits: LEB128 values of ten bytes.
EXTREMES = """
enum wide { WIDE_MIN = -0x7fffffffffffffffLL - 1, WIDE_NEG = -1, WIDE_MAX = 0x7fffffffffffffffLL };
enum uwide { UWIDE_MAX = 0xffffffffffffffffULL };
struct bits { int a : 3; unsigned long long b : 61; } bits;
enum wide wide;
enum uwide uwide;
"""


@pytest.fixture(scope='module')
def c_decoder():
    """The C decoder, which the compiled build must have."""
    if reader._C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C DWARF decoder: '
                    'install it compiled (scripts/install.sh)')
    return reader._C


def c_units(c_decoder, secs: DebugSections) -> list[CompileUnit] | None:
    return c_decoder.read_units(secs.info, secs.abbrev, secs.str, secs.line_str,
                                secs.str_offsets, secs.loclists, secs.byteorder == 'big')


def values_shape(values) -> tuple:
    # Types too: True == 1, but DW_FORM_flag_present gives True, DW_FORM_flag an int.
    return tuple((type(v).__name__, v) for v in values)


def item_shape(item: tuple) -> tuple:
    """A member, enumerator or parameter (reader.ITEM_ATTRS): its values, and the DIEs under it."""
    *values, children = item
    return values_shape(values), type(children).__name__, tuple(c.offset for c in children)


def in_c(units: list[CompileUnit]) -> set[int]:
    """The offsets of the DIEs the C decoder keeps in C by its rule (the
    Arena, _arena.h): every type DIE, and every DIE under one, its items'
    included."""
    out: set[int] = set()

    def keep(die: Die) -> None:
        out.add(die.offset)
        for child in die.children:
            keep(child)
        for item in die.items:
            for child in item[-1]:
                keep(child)
    for u in units:
        for die in u.all_dies():
            if die.tag in reader.TYPE_TAGS:
                keep(die)
    return out


def die_shape(die: Die, arena: set[int]) -> tuple:
    """A Die as it is, but that the children of one made in Python leave
    out those kept in C (``arena``), as the C decoder's do."""
    children = tuple(c.offset for c in die.children
                     if die.offset in arena or c.offset not in arena)
    return (die.offset, die.tag, die.top, tuple(die.attrs), values_shape(die.attrs.values()),
            type(die.children).__name__, children,
            type(die.items).__name__, tuple(item_shape(i) for i in die.items))


def shape(units: list[CompileUnit]) -> list[tuple]:
    arena = in_c(units)
    return [(u.offset, u.version, u.address_size, die_shape(u.die, arena),
             [die_shape(d, arena) for d in u.all_dies()],
             [o for o in u.by_offset if o not in arena],
             all(u.by_offset[d.offset] is d for d in u.dies), u.addr_base, u.annotated)
            for u in units]


def sections_of(path: Path) -> DebugSections:
    with ElfFile.open(str(path)) as elf:
        return debug_sections(elf)


def assert_same_units(c_decoder, path: Path) -> None:
    """The C decoder's units are the Python decoder's: its Dies and those
    its Arena makes, in order, with the same values; it keeps in C the
    DIEs its rule says (``in_c``), and in Python the others."""
    secs = sections_of(path)
    ours = c_units(c_decoder, secs)
    assert ours is not None, f'{path}: the C decoder gave up'
    assert shape(ours) == shape(decode_units(secs)), path
    in_python = {d.offset for u in ours for d in u.dies}
    assert {d.offset for u in ours for d in u.all_dies()} - in_python == in_c(ours), path
    assert set().union(*(u.by_offset for u in ours)) == in_python, path


#: Every source with every variant, but kinds.c's __int128 on i386.
BUILDS = [(v, s) for v in VARIANTS for s in ('kinds.c', 'scopes.c', 'tags.c', 'extremes.c')
          if (v, s) != ('gcc-m32', 'kinds.c')]


@pytest.mark.parametrize('variant, source', BUILDS)
def test_the_c_decoder_gives_the_python_decoders_units(c_decoder, tmp_path, variant, source):
    compiler, *flags = VARIANTS[variant]
    src = C_FIXTURES / source
    if source == 'extremes.c':
        src = tmp_path / source
        src.write_text(EXTREMES)
    assert_same_units(c_decoder, compile_c(compiler, src, tmp_path / 'out.o', *flags))


@pytest.mark.parametrize('variant', ['clang-dwarf4', 'clang-dwarf5'])
def test_type_dies_nested_deeper_than_the_first_stack(c_decoder, tmp_path, variant):
    """Eighty anonymous unions, each in the last, which clang nests as
    deep: the decoder's stack of open DIEs grows while a type DIE's
    children are being linked.  Also decoded in a child whose allocator
    fills freed memory (PYTHONMALLOC=debug), where a pointer into the
    stack from before it grew reads garbage."""
    compiler, *flags = VARIANTS[variant]
    obj = compile_c(compiler, nested_unions(tmp_path / 'deep.c'), tmp_path / 'deep.o', *flags)

    def nesting(die: Die) -> int:
        return 1 + max([nesting(c) for c in die.children], default=0)
    assert max(nesting(d) for d in decode_units(sections_of(obj))[0].dies) > 64
    assert_same_units(c_decoder, obj)
    count = ('import sys\n'
             'from objbtf.elf.reader import ElfFile\n'
             'from objbtf.encode.encoder import debug_sections\n'
             'from objbtf.dwarf.reader import _C\n'
             'with ElfFile.open(sys.argv[1]) as elf:\n'
             '    s = debug_sections(elf)\n'
             '    units = _C.read_units(s.info, s.abbrev, s.str, s.line_str, s.str_offsets,\n'
             '                          s.loclists, False)\n'
             'print(sum(len(u.all_dies()) for u in units))\n')
    child = subprocess.run([sys.executable, '-c', count, str(obj)], capture_output=True,
                           text=True, env={**os.environ, 'PYTHONMALLOC': 'debug'})
    assert child.returncode == 0, child.stderr[-2000:]
    expected = sum(len(u.all_dies()) for u in c_units(c_decoder, sections_of(obj)))
    assert child.stdout.strip() == str(expected)


def test_the_c_decoder_gives_every_kernel_objects_units(c_decoder, kernel_build, kernel_sample):
    """Every object of the reference kernel with DWARF (gcc, DWARF 5) that
    the per-object step encodes: not vmlinux.o, the whole kernel's DWARF in
    one file (test_blob_passes encodes it with the C decoder), whose units,
    shaped by both decoders at once, took 9.8 GB and 60 of the test's 100 s.
    In the default tier, a sample (conftest.kernel_sample)."""
    objects = 0
    with gc_paused():               # as the encoder decodes: else collections take most of it
        for path in sorted(kernel_build.rglob('*.o'))[::kernel_sample]:
            if path.name == 'vmlinux.o':
                continue
            with ElfFile.open(str(path)) as elf:
                if not has_dwarf(elf):
                    continue
            assert_same_units(c_decoder, path)
            objects += 1
    assert objects > 800 // kernel_sample


def outcome(fn, *args) -> tuple:
    try:
        return 'units', shape(fn(*args))
    except DwarfError as err:
        return 'error', str(err)


@pytest.mark.parametrize('damage', ['info', 'abbrev', 'str', 'form'])
def test_where_the_c_decoder_gives_up_python_decides(c_decoder, tmp_path, damage):
    """Damaged sections: the C decoder returns None, and read_units gives
    what the Python decoder gives, its error message included."""
    secs = sections_of(compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o', '-gdwarf-5'))
    if damage == 'info':            # a unit cut short
        secs.info = secs.info[:len(secs.info) // 2]
    elif damage == 'abbrev':        # an abbreviation table cut short
        secs.abbrev = secs.abbrev[:len(secs.abbrev) // 2]
    elif damage == 'str':           # names past the end of .debug_str
        secs.str = secs.str[:8]
    else:                           # DW_FORM_indirect, which neither decodes
        at = first_form(secs.abbrev)
        secs.abbrev = secs.abbrev[:at] + bytes([0x16]) + secs.abbrev[at + 1:]
    assert c_units(c_decoder, secs) is None
    expected = outcome(decode_units, secs)
    assert expected[0] == 'error'
    assert outcome(reader.read_units, secs) == expected


def first_form(abbrev: bytes) -> int:
    """Where the form of the first attribute of the first abbreviation (the
    unit DIE's) is: a one-byte ULEB128."""
    _, pos = reader.read_uleb(abbrev, 0)        # its code
    _, pos = reader.read_uleb(abbrev, pos)      # tag
    _, pos = reader.read_uleb(abbrev, pos + 1)  # after the children flag, the attribute
    assert abbrev[pos] < 0x80
    return pos


def test_a_location_list_offset_that_wraps_is_left_to_python(c_decoder, tmp_path):
    """A hostile .debug_loclists (64-bit DWARF) whose first offset entry is
    2**64 - 1: DW_FORM_loclistx's value, the table's base plus that offset,
    is past 64 bits.  The Python decoder's ints hold it; the C decoder gives
    up rather than wrap it around."""
    obj = compile_c('clang', C_FIXTURES / 'kinds.c', tmp_path / 'l.o', '-gdwarf-5', '-gdwarf64',
                    '-O2')
    secs = sections_of(obj)
    base = 20                       # the offset entries, past the 64-bit header
    assert secs.loclists[:4] == b'\xff' * 4 and len(secs.loclists) > base + 8
    secs.loclists = secs.loclists[:base] + b'\xff' * 8 + secs.loclists[base + 8:]
    assert c_units(c_decoder, secs) is None
    assert outcome(reader.read_units, secs) == outcome(decode_units, secs)
