"""The compiler-BTF loader in C (objbtf/compiler_btf/_amend.c) against its
Python twin.

In the compiled build, ``load_compiler_btf`` loads GCC's BTF in C
(``c_load``); ``_Loader`` (``python_load``) is its Python twin, which the
pure-Python build runs and which takes over wherever the C gives up (None).
Where the C runs, it must give what the Python gives: the same types and
ids, the same variables placed, functions chosen, facts and losses.  Where the
Python raises, the C must give up.  test_compiler_btf.py compares the
result with what the DWARF path gives for the same source.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import C_FIXTURES, need, run

import objbtf
from objbtf.compiler_btf import loader as loader_module
from objbtf.compiler_btf.loader import c_load, python_load
from objbtf.elf.reader import ElfFile
from objbtf.features import Features

#: GCC 12 emits BTF for each of these targets (s390x: big-endian).
COMPILERS = {
    'x86_64': ('gcc', '-gbtf'),
    'x86_64-g': ('gcc', '-g', '-gbtf'),
    'i386': ('gcc', '-m32', '-gbtf'),
    'arm64': ('aarch64-linux-gnu-gcc', '-gbtf'),
    's390x': ('s390x-linux-gnu-gcc', '-gbtf'),
}
FEATURES = ('default', 'default,global_var', 'default,-float,-var', 'default,-enum64,-decl_tag')
SOURCES = sorted(p.stem for p in C_FIXTURES.glob('*.c'))


@pytest.fixture(scope='module', autouse=True)
def c_amend():
    """objbtf.compiler_btf._amend, which the compiled build must have."""
    if loader_module._C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C loader of '
                    "compilers' BTF: install it compiled (scripts/install.sh)")


def compile_gbtf(src: Path, out: Path, target: str) -> Path:
    compiler, *flags = COMPILERS[target]
    run(need(compiler), '-O2', '-c', *flags, '-o', out, src)
    return out


def btf_of(elf: ElfFile) -> bytes:
    sec = elf.section_by_name('.BTF')
    assert sec is not None
    return elf.section_data(sec)


def shape(loaded) -> tuple:
    """Everything a Loaded holds, comparable."""
    return ([t.key() for t in loaded.btf.types], loaded.btf.byteorder,
            {sec: list(rows) for sec, rows in loaded.entries.items()},
            loaded.functions, loaded.variables, list(loaded.facts.items()), loaded.losses)


def outcomes(elf: ElfFile, data: bytes, features: Features) -> tuple:
    """(the C's shape or None, the Python's shape or its error)."""
    made = c_load(elf, data, features)
    try:
        python: tuple = shape(python_load(elf, data, features))
    except Exception as err:        # the Python's own error: the C must give up
        python = ('error', type(err).__name__, str(err))
    return (None if made is None else shape(made)), python


def assert_same(elf: ElfFile, data: bytes, features: Features, where: object) -> bool:
    """The C gives the Python's result, or gives up; whether it gave up."""
    c, python = outcomes(elf, data, features)
    if c is None:
        return True
    assert python[0] != 'error', f'{where}: the Python raised {python[1:]}, the C did not give up'
    assert c == python, f'{where}: the C and the Python differ'
    return False


@pytest.mark.parametrize('features', FEATURES)
@pytest.mark.parametrize('target', sorted(COMPILERS))
def test_fixtures(tmp_path, target, features):
    """Every C fixture that compiles for the target: the same result, and
    the C never gives up on what GCC wrote."""
    wanted = Features.parse(features)
    compiled = 0
    for src in SOURCES:
        if target == 'i386' and src == 'kinds':
            continue            # __int128, which i386 lacks
        obj = compile_gbtf(C_FIXTURES / f'{src}.c', tmp_path / f'{src}.o', target)
        with ElfFile.open(str(obj)) as elf:
            assert not assert_same(elf, btf_of(elf), wanted, f'{src}.c for {target}'), \
                f'{src}.c for {target}: the C gave up'
        compiled += 1
    assert compiled >= len(SOURCES) - 1


@pytest.mark.kernel
def test_kernel_objects(kernel_build, tmp_path):
    """Every 40th C object of the reference kernel, compiled again with its
    saved Kbuild command and -gbtf instead of -g, as the DWARF-less build
    compiles: the same result, and no give-up."""
    from kernel_tree import objects
    from saved_commands import compile_command, without_dwarf
    checked = 0
    for obj in objects(kernel_build)[::40]:
        cmd = compile_command(kernel_build, obj, tmp_path / 'gbtf.o')
        if cmd is None:
            continue
        run(*without_dwarf(cmd), cwd=kernel_build)
        with ElfFile.open(str(tmp_path / 'gbtf.o')) as elf:
            if elf.section_by_name('.BTF') is None:
                continue        # assembly
            assert not assert_same(elf, btf_of(elf), Features(), obj), f'{obj}: the C gave up'
        checked += 1
    assert checked > 15


def damaged(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to three words changed: to a small number, a type
    id near the end, a kind, or random bits (the header's too)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(0, len(out) - 3) & ~3
        value = rng.choice([rng.randrange(0, 8), rng.randrange(0, 1 << 32),
                            rng.randrange(1, 20) << 24 | rng.randrange(0, 4),
                            len(data) // 12 + rng.randrange(-3, 3)]) & 0xffffffff
        out[at:at + 4] = value.to_bytes(4, rng.choice(['little', 'big']))
    return bytes(out)


@pytest.mark.parametrize('source', ['kinds', 'lost_enumerators'])
@pytest.mark.parametrize('target', ['x86_64', 's390x'])
def test_damaged_copies(tmp_path, target, source):
    """1,000 damaged copies of GCC's BTF of kinds.c (every kind), and of
    lost_enumerators.c (the losses its enums show): the C gives what the
    Python gives, or gives up; where the Python raises, the C gives up.
    Some of each must happen, or the damage tested nothing."""
    obj = compile_gbtf(C_FIXTURES / f'{source}.c', tmp_path / f'{source}.o', target)
    rng = random.Random(f'amend-{target}' + ('' if source == 'kinds' else f'-{source}'))
    gave_up = agreed = 0
    with ElfFile.open(str(obj)) as elf:
        data = btf_of(elf)
        for case in range(1000):
            if assert_same(elf, damaged(data, rng), Features(), f'case {case}'):
                gave_up += 1
            else:
                agreed += 1
    assert gave_up > 50 and agreed > 200, (gave_up, agreed)

