"""What GCC 12's BTF loses, counted where its own types show it
(docs/dwarfless.md, "What GCC 12's BTF lacks"): the encoder records it in
the object's chunk, ``objbtf check`` names it, and the link of vmlinux
says once, even with -q, that a BTF made from GCC's -gbtf lacks it.

``lost_enumerators.c`` holds each kind of loss the enums show, losses they
do not show, and enums that lost nothing; every other C fixture shows none.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import C_FIXTURES, need, objbtf, run

from objbtf.btf.chunk import (FROM_COMPILER_BTF, FROM_DWARF, LOST_ALL_ENUMERATORS,
                              LOST_WIDE_ENUMERATORS, SECTION, split_chunks)
from objbtf.compiler_btf.loader import load_compiler_btf, python_load
from objbtf.elf.reader import ElfFile
from objbtf.features import Features

FIXTURE = 'lost_enumerators'
#: What the fixture's GCC BTF shows it lost, by (LOST_*, enum name).
LOSSES = [(LOST_ALL_ENUMERATORS, 'all_lost'), (LOST_ALL_ENUMERATORS, 'all_lost_wide'),
          (LOST_ALL_ENUMERATORS, ''), (LOST_WIDE_ENUMERATORS, 'wide_lost')]
#: GCC 12 writes BTF for each (s390x: big-endian; i386: 4-byte longs).
TARGETS = {'x86_64': ('gcc',), 'i386': ('gcc', '-m32'), 'arm64': ('aarch64-linux-gnu-gcc',),
           's390x': ('s390x-linux-gnu-gcc',)}
NOTE = 'objbtf link: note: '


def compile_gbtf(name: str, out: Path, target: str = 'x86_64') -> Path:
    compiler, *machine = TARGETS[target]
    run(need(compiler), '-O2', '-c', '-gbtf', *machine, '-o', out, C_FIXTURES / f'{name}.c')
    return out


def renamed(obj: Path, out: Path) -> Path:
    """A copy of ``obj`` whose symbols do not clash with its own in a link."""
    run(need('objcopy'), '--prefix-symbols=copy_', obj, out)
    return out


def losses_of(obj: Path) -> tuple[list, list]:
    """What the loader the build runs and its Python twin count in ``obj``."""
    with ElfFile.open(str(obj)) as elf:
        data = elf.section_data(elf.section_by_name('.BTF'))
        return (load_compiler_btf(elf, data, Features()).losses,
                python_load(elf, data, Features()).losses)


def chunk_of(obj: Path):
    with ElfFile.open(str(obj)) as elf:
        [chunk] = split_chunks(elf.section_data(elf.section_by_name(SECTION)), elf.byteorder)
    return chunk


def notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(NOTE)]


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_the_losses_the_enums_show_are_counted(tmp_path, target):
    """Exactly the fixture's shown losses, on every target; not the losses
    that look whole (an unsigned 4-byte value, an 8-byte enum with a
    negative one left), nor a declared enum, which the loader makes an
    ENUM without values too."""
    loaded, python = losses_of(compile_gbtf(FIXTURE, tmp_path / 'le.o', target))
    assert sorted(loaded) == sorted(python) == sorted(LOSSES)


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_no_losses_on_the_other_fixtures(tmp_path, target):
    """No C fixture but the losses' own shows a loss: no false positive
    (kinds.c's 8-byte enums keep a negative value each)."""
    for src in sorted(p.stem for p in C_FIXTURES.glob('*.c')):
        if src == FIXTURE or (target == 'i386' and src == 'kinds'):
            continue                # (__int128, which i386 lacks)
        assert losses_of(compile_gbtf(src, tmp_path / f'{src}.o', target)) == ([], []), src


def test_the_chunk_records_the_source_and_the_losses(tmp_path):
    """An object encoded from GCC's BTF says so in its chunk, with its
    losses; one encoded from DWARF (the same source, -g) says neither."""
    gbtf = compile_gbtf(FIXTURE, tmp_path / 'gbtf.o')
    dwarf = tmp_path / 'dwarf.o'
    run(need('gcc'), '-O2', '-c', '-g', '-o', dwarf, C_FIXTURES / f'{FIXTURE}.c')
    objbtf('encode', gbtf, dwarf)
    chunk = chunk_of(gbtf)
    assert (chunk.source, sorted(chunk.losses)) == (FROM_COMPILER_BTF, sorted(LOSSES))
    chunk = chunk_of(dwarf)
    assert (chunk.source, chunk.losses) == (FROM_DWARF, [])


def test_check_names_the_losses_and_passes(tmp_path):
    """``objbtf check`` passes the object and adds a line per kind of loss,
    naming the file and the enums; nothing for an object without losses."""
    obj = compile_gbtf(FIXTURE, tmp_path / 'le.o')
    clean = compile_gbtf('scopes', tmp_path / 'scopes.o')
    objbtf('encode', obj, clean)
    r = objbtf('check', obj)
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        f"{obj}: OK, BTF follows the kernel's rules",
        f"{obj}: its compiler's BTF lost every enumerator (all outside 32 bits) of "
        'enum all_lost, enum all_lost_wide, enum (anon) (docs/dwarfless.md)',
        f"{obj}: its compiler's BTF lost the enumerators past 32 bits of enum wide_lost "
        '(docs/dwarfless.md)']
    r = objbtf('check', clean)
    assert r.returncode == 0 and r.stdout.splitlines() == [
        f"{clean}: OK, BTF follows the kernel's rules"]


def test_check_names_each_object_of_a_linked_file(tmp_path):
    """A relocatable link of several encoded objects: each object's losses,
    by its name."""
    first = compile_gbtf(FIXTURE, tmp_path / 'first.o')
    second = renamed(first, tmp_path / 'second.o')
    objbtf('encode', 'first.o', 'second.o', cwd=tmp_path)
    linked = tmp_path / 'linked.o'
    run(need('ld'), '-r', '-o', linked, first, second)
    lines = objbtf('check', linked, check=False).stdout.splitlines()
    for name in ('first.o', 'second.o'):
        assert sum(line.startswith(f"{linked}: {name}: its compiler's BTF lost")
                   for line in lines) == 2, lines


def test_a_dwarfless_link_says_what_its_btf_lacks(tmp_path):
    """The link of objects encoded from GCC's BTF says, at its end and even
    with -q, that the BTF lacks what GCC 12's lacks, with the enums counted
    (by name, over every object) and where to read more; in two lines."""
    first = compile_gbtf(FIXTURE, tmp_path / 'a.o')
    objs = [first, compile_gbtf('kinds', tmp_path / 'b.o'), renamed(first, tmp_path / 'c.o')]
    objbtf('encode', *objs)
    linked = tmp_path / 'vmlinux.o'
    run(need('ld'), '-r', '-o', linked, *objs)
    r = objbtf('link', '-q', '--output', tmp_path / 'out.btf', linked)
    assert r.stderr.splitlines() == notes(r.stderr) and len(notes(r.stderr)) == 2
    first, second = notes(r.stderr)
    assert 'the BTF of 3 of 3 objects came from GCC\'s -gbtf' in first
    assert 'enumerators outside 32 bits (4 enums here lost some or all)' in first
    assert 'types declared in functions' in first and 'parameter locations' in first
    assert 'docs/dwarfless.md' in second
    loud = objbtf('link', '--output', tmp_path / 'out.btf', linked).stderr.splitlines()
    assert loud[-2:] == [first, second] and len(notes('\n'.join(loud))) == 2


def test_a_link_from_dwarf_and_a_module_link_say_nothing(tmp_path):
    """No note where the objects were encoded from DWARF, nor in a module's
    link (one per module), DWARF-less or not."""
    dwarf = tmp_path / 'dwarf.o'
    run(need('gcc'), '-O2', '-c', '-g', '-o', dwarf, C_FIXTURES / f'{FIXTURE}.c')
    objbtf('encode', dwarf)
    linked = tmp_path / 'dwarf-vmlinux.o'
    run(need('ld'), '-r', '-o', linked, dwarf)
    assert notes(objbtf('link', '--output', tmp_path / 'dwarf.btf', linked).stderr) == []
    base_obj, module_obj = (compile_gbtf(src, tmp_path / f'{src}.o')
                            for src in (FIXTURE, 'counter_a'))
    objbtf('encode', base_obj, module_obj)
    base_linked, module = tmp_path / 'base.o', tmp_path / 'mod.ko'
    run(need('ld'), '-r', '-o', base_linked, base_obj)
    run(need('ld'), '-r', '-o', module, module_obj)
    base = tmp_path / 'base.btf'
    assert len(notes(objbtf('link', '-q', '--output', base, base_linked).stderr)) == 2
    assert objbtf('link', '-q', '--base', base, module).stderr == ''
