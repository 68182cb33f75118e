"""``objbtf encode --drop-dwarf`` (and OBJBTF_DROP_DWARF=1): the BTF of a
DWARF build, byte for byte, in objects whose DWARF sections are emptied.

Every object is compiled for real; the oracles are the same object encoded
without dropping, binutils' readelf and ld, and objbtf link's output.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import C_FIXTURES, FIXTURES, ROOT, compile_c, need, objbtf, run
from objbtf.elf.reader import ElfFile

#: (compiler, flags, fixture): DWARF 5 and 4, compressed DWARF
#: (SHF_COMPRESSED), the legacy .zdebug_ form, clang's, and i386 (REL
#: relocations; kinds.c has an __int128, which i386 lacks).
VARIANTS = {
    'gcc-dwarf5': ('gcc', ('-gdwarf-5',), 'kinds.c'),
    'gcc-dwarf4': ('gcc', ('-gdwarf-4',), 'kinds.c'),
    'gcc-gz': ('gcc', ('-gz',), 'kinds.c'),
    'gcc-gz-gnu': ('gcc', ('-gz=zlib-gnu',), 'kinds.c'),
    'clang-dwarf5': ('clang', ('-gdwarf-5',), 'kinds.c'),
    'gcc-m32': ('gcc', ('-m32',), 'scopes.c'),
}
OBJBTF_SECTIONS = ('.BTF', '.BTF.objbtf', '.rela.BTF', '.rel.BTF')


def sections(path: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every section by name: (type, flags, contents as the file has them)."""
    with ElfFile.open(str(path)) as elf:
        return {s.name: (s.type, s.flags, bytes(elf.data[s.offset:s.offset + s.size])
                         if s.type != 8 else b'') for s in elf.sections}


def is_dwarf(name: str) -> bool:
    return name.startswith(('.debug_', '.zdebug_', '.rela.debug_', '.rel.debug_',
                            '.rela.zdebug_', '.rel.zdebug_'))


def encoded_pair(tmp_path: Path, variant: str) -> tuple[Path, Path]:
    """The variant's fixture compiled once, encoded as it is (``kept/unit.o``) and
    with --drop-dwarf (``dropped/unit.o``), each under the name ``unit.o``
    (which its chunk records)."""
    compiler, flags, source = VARIANTS[variant]
    kept, dropped = (tmp_path / 'kept' / 'unit.o', tmp_path / 'dropped' / 'unit.o')
    for obj in (kept, dropped):
        obj.parent.mkdir()
    compile_c(compiler, C_FIXTURES / source, kept, *flags)
    shutil.copyfile(kept, dropped)
    objbtf('encode', 'unit.o', cwd=kept.parent)
    objbtf('encode', '--drop-dwarf', 'unit.o', cwd=dropped.parent)
    return kept, dropped


@pytest.mark.parametrize('variant', sorted(VARIANTS))
def test_dropped_dwarf_leaves_the_btf_and_every_other_section_as_they_were(tmp_path, variant):
    kept, dropped = encoded_pair(tmp_path, variant)
    before, after = sections(kept), sections(dropped)
    assert list(before) == list(after)           # no section added, removed or renumbered
    dwarf = [name for name in before if is_dwarf(name)]
    assert any(name.startswith(('.debug_info', '.zdebug_info')) for name in dwarf)
    for name in before:
        if is_dwarf(name):
            assert after[name][2] == b'', f'{name} kept bytes'
        else:
            assert after[name] == before[name], f'{name} changed'
    assert sum(1 for name in before if name in OBJBTF_SECTIONS) >= 2
    assert dropped.stat().st_size < kept.stat().st_size
    info = run(need('readelf'), '--debug-dump=info', dropped).stdout
    assert 'DW_TAG' not in info
    assert objbtf('check', dropped).returncode == 0


def test_ld_links_dropped_objects_and_the_link_gives_the_same_btf(tmp_path):
    """ld takes the emptied sections, and objbtf link makes the same BTF
    from the objects with or without their DWARF."""
    units = sorted((FIXTURES / 'dedup').glob('unit_*.c'))
    for mode in ('kept', 'dropped'):
        d = tmp_path / mode
        d.mkdir()
        objs = []
        for src in units:
            obj = f'{src.stem}.o'
            run(need('gcc'), '-g', '-O2', '-c', '-o', d / obj, src)
            objbtf('encode', *(['--drop-dwarf'] if mode == 'dropped' else []), obj, cwd=d)
            objs.append(obj)
        run(need('ld'), '-r', '-o', d / 'all.o', *[d / o for o in objs])
        objbtf('link', '--output', 'out.btf', 'all.o', cwd=d)
    assert (tmp_path / 'dropped' / 'out.btf').read_bytes() == \
        (tmp_path / 'kept' / 'out.btf').read_bytes()
    linked = sections(tmp_path / 'dropped' / 'all.o')
    assert all(not data for name, (_, _, data) in linked.items() if is_dwarf(name))


def test_cc_drops_and_the_environment_asks_as_the_flag_does(tmp_path):
    """``objbtf cc --drop-dwarf`` and OBJBTF_DROP_DWARF=1 (what ``make
    OBJBTF_DROP_DWARF=1`` puts in every recipe's environment) give the
    flag's bytes; OBJBTF_DROP_DWARF=0 keeps the DWARF."""
    src = C_FIXTURES / 'kinds.c'
    (tmp_path / 'flag').mkdir()
    objbtf('cc', '--drop-dwarf', '--', need('gcc'), '-g', '-O2', '-c', '-o', 'unit.o', src,
           cwd=tmp_path / 'flag')
    results = {}
    for value in ('1', '0'):
        d = tmp_path / f'env{value}'
        d.mkdir()
        run(need('gcc'), '-g', '-O2', '-c', '-o', d / 'unit.o', src)
        run(sys.executable, '-m', 'objbtf', 'encode', 'unit.o', cwd=d,
            env={**os.environ, 'PYTHONPATH': str(ROOT), 'OBJBTF_DROP_DWARF': value})
        results[value] = sections(d / 'unit.o')
    assert results['1'] == sections(tmp_path / 'flag' / 'unit.o')
    assert results['0']['.debug_info'][2] != b''


def test_a_dropped_object_is_not_encoded_again(tmp_path):
    """Its BTF cannot be made again without DWARF: the encode says so,
    names the object, fails, and leaves it as it was."""
    _, dropped = encoded_pair(tmp_path, 'gcc-dwarf5')
    before = dropped.read_bytes()
    r = objbtf('encode', dropped, check=False)
    assert r.returncode == 1
    assert str(dropped) in r.stderr and '--drop-dwarf' in r.stderr
    assert dropped.read_bytes() == before


def test_an_object_without_btf_types_drops_its_dwarf_too(tmp_path):
    """Assembly with DWARF but no function BTF keeps (a chunk only) loses its
    DWARF as well: the tree keeps no DWARF the BTF did not need."""
    (tmp_path / 'data.S').write_text('.data\n.globl table\ntable: .long 1\n')
    run(need('gcc'), '-g', '-c', '-o', tmp_path / 'data.o', tmp_path / 'data.S')
    assert objbtf('encode', '-q', '--drop-dwarf', 'data.o', cwd=tmp_path).returncode == 0
    after = sections(tmp_path / 'data.o')
    assert '.BTF.objbtf' in after and '.BTF' not in after
    assert all(not data for name, (_, _, data) in after.items() if is_dwarf(name))
