"""Relocations read and applied in C (objbtf/elf/_relocs.c) against the Python code.

The compiled build relocates an object's DWARF (``apply_relocations``) and
maps its address relocations (``ElfFile.relocations_by_field``) in C.  Both
must give what the Python code gives: the same bytes, the same maps, and on
damaged relocations the same error, which the C code leaves to the Python
code.  The compiled modules call the C code directly, so the Python code
runs in a process of its own, with OBJBTF_PURE=1, on the same objects.
"""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c

import objbtf
from objbtf.elf import reader, relocs
from objbtf.elf.consts import SHT_REL, SHT_RELA
from objbtf.elf.errors import ElfError
from objbtf.elf.reader import ElfFile
from objbtf.elf.relocs import apply_relocations, arch_for

HERE = Path(__file__).resolve().parent
#: Each machine objbtf relocates, REL (i386) and RELA, both byte orders,
#: compressed DWARF, and DWARF 4 (whose sections other relocations hold).
VARIANTS = {
    'gcc': ('gcc', '-gdwarf-5'),
    'gcc-dwarf4': ('gcc', '-gdwarf-4'),
    'gcc-compressed': ('gcc', '-gz'),
    'gcc-m32': ('gcc', '-m32'),
    'gcc-aarch64': ('aarch64-linux-gnu-gcc',),
    'gcc-s390x': ('s390x-linux-gnu-gcc',),
    'clang': ('clang',),
    'clang-s390x': ('clang', '--target=s390x-linux-gnu'),
}
SOURCES = ('scopes.c', 'counter_a.c', 'tags.c')
MUTATIONS = 150


def outcome(call) -> tuple[str, bool]:
    """What ``call()`` returns, or the error it raises; whether it raised."""
    try:
        return repr(call()), False
    except Exception as err:            # noqa: BLE001 (the error is the outcome)
        return f'{type(err).__name__}: {err}', True


def relocated(data: bytes, path: str) -> str:
    """What the relocation code gives for every debug section of the ELF
    file ``data``: each section relocated, and its 4- and 8-byte fields'
    relocations, all of them and the address-sized types', or the errors
    (a digest of it all, and how many errors)."""
    digest = hashlib.sha256()
    errors = 0
    try:
        elf = ElfFile(data, path)
        machine = arch_for(elf)
    except ElfError as err:
        return f'{err}'
    for sec in [s for s in elf.sections if s.name.startswith('.debug')]:
        calls = [lambda: apply_relocations(elf, sec)]
        for width in (4, 8):
            address = frozenset(t for t, r in machine.types.items() if r.width == width)
            calls += [lambda w=width: sorted(elf.relocations_by_field(sec, w).items()),
                      lambda w=width, a=address: sorted(elf.relocations_by_field(sec, w, a).items())]
        for call in calls:
            text, failed = outcome(call)
            digest.update(text.encode())
            errors += failed
    return f'{digest.hexdigest()} errors={errors}'


def mutated(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to five bytes of its relocation entries changed."""
    elf = ElfFile(data)
    tables = [s for s in elf.sections if s.type in (SHT_REL, SHT_RELA) and s.size]
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 5])):
        sec = rng.choice(tables)
        pos = sec.offset + rng.randrange(sec.size)
        out[pos] = rng.choice([0, 0xff, rng.randrange(256), out[pos] ^ 1 << rng.randrange(8)])
    return bytes(out)


def outcomes(paths: list[str]) -> list[str]:
    """A line per object and per mutated copy of it (the same copies in
    every process: the random generator is seeded with the object's name)."""
    lines = []
    for path in paths:
        data = Path(path).read_bytes()
        lines.append(f'{path} {relocated(data, path)}')
        rng = random.Random(Path(path).name)
        for n in range(MUTATIONS):
            lines.append(f'{path}#{n} {relocated(mutated(data, rng), path)}')
    return lines


@pytest.fixture(scope='module')
def objects(tmp_path_factory) -> list[str]:
    tmp = tmp_path_factory.mktemp('relocs')
    return [str(compile_c(compiler, C_FIXTURES / source, tmp / f'{variant}-{source}.o', *flags))
            for variant, (compiler, *flags) in VARIANTS.items() for source in SOURCES]


def test_the_c_code_relocates_as_the_python_code(objects):
    if reader._C is None or relocs._C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C relocations: '
                    'install it compiled (scripts/install.sh)')
    python = subprocess.run(
        [sys.executable, '-c', 'import sys; from test_c_relocations import outcomes; '
         'print("\\n".join(outcomes(sys.argv[1:])))', *objects],
        cwd=HERE, env={**os.environ, 'OBJBTF_PURE': '1'}, check=True, capture_output=True,
        text=True).stdout.splitlines()
    ours = outcomes(objects)
    assert len(ours) == len(objects) * (MUTATIONS + 1)
    differ = [f'{a}\n  python: {b}' for a, b in zip(ours, python, strict=True) if a != b]
    assert not differ, f'{len(differ)} differ:\n' + '\n'.join(differ[:5])
    # The mutations reach the errors: the Python code refused some copies.
    assert sum(not line.endswith(' errors=0') for line in python) > 100
