"""What GCC 12's BTF loses, counted where its own types show it
(docs/dwarfless.md, "What GCC 12's BTF lacks"): the encoder records it in
the object's chunk.

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


def compile_gbtf(name: str, out: Path, target: str = 'x86_64') -> Path:
    compiler, *machine = TARGETS[target]
    run(need(compiler), '-O2', '-c', '-gbtf', *machine, '-o', out, C_FIXTURES / f'{name}.c')
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
