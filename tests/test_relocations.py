"""Two objects with the same `static int counter`, and percpu subsections:
real relocations place each variable, and the linker resolves them."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import C_FIXTURES, compile_c, need, objbtf, run
from objbtf.btf import Kind, parse_btf
from objbtf.btf.kinds import KINDS
from linkdedup.concat import split_blobs
from objbtf.elf.reader import ElfFile


def rela_btf(obj: Path) -> list[tuple[int, str, str]]:
    """(offset, type, symbol) rows of `readelf -r` for .rela.BTF."""
    out = run(need('readelf'), '-rW', obj).stdout
    part = out.split("Relocation section '.rela.BTF'")[1].split('Relocation section')[0]
    rows = []
    for line in part.splitlines()[2:]:
        m = re.match(r'\s*([0-9a-f]+)\s+[0-9a-f]+\s+(\S+)\s+[0-9a-f]+\s+(\S+)', line)
        if m:
            rows.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return rows


def symbol_sections(obj: Path) -> dict[str, str]:
    with ElfFile.open(str(obj)) as elf:
        return {s.name: elf.sections[s.shndx].name for s in elf.symbols()
                if s.type == 1 and 0 < s.shndx < len(elf.sections)}


def datasec_fields(btf_raw: bytes) -> list[tuple[int, str, str]]:
    """(byte offset of the secinfo offset field, DATASEC name, VAR name)."""
    btf = parse_btf(btf_raw)
    rows = []
    pos = 24
    for _, t in btf.own():
        if t.kind is Kind.DATASEC:
            for j, v in enumerate(t.items):
                rows.append((pos + 12 + 12 * j + 4, t.name, btf[v.type].name))
        pos += 12 + KINDS[t.kind].extra_len(t.vlen)
    return rows


def encoded_counters(tmp_path: Path) -> list[Path]:
    """counter_a.o and counter_b.o, compiled and encoded."""
    objs = []
    for name in ('counter_a', 'counter_b'):
        obj = compile_c('gcc', C_FIXTURES / f'{name}.c', tmp_path / f'{name}.o')
        objbtf('encode', obj)
        objs.append(obj)
    return objs


def test_each_variable_relocated_against_its_own_symbol(tmp_path):
    objs = encoded_counters(tmp_path)
    for obj in objs:
        with ElfFile.open(str(obj)) as elf:
            raw = elf.section_data(elf.section_by_name('.BTF'))
        fields = datasec_fields(raw)
        relocs = rela_btf(obj)
        assert sorted((off, var) for off, _, var in fields) == sorted(
            (off, sym) for off, _, sym in relocs)
        assert {t for _, t, _ in relocs} == {'R_X86_64_32S'}
        sections = symbol_sections(obj)
        for _, sec, var in fields:
            assert sections[var] == sec, (obj.name, var)
    assert {v for _, _, v in datasec_fields(_btf(objs[0]))} == {'counter', 'other'}
    assert {v for _, _, v in datasec_fields(_btf(objs[1]))} == {'pad', 'counter', 'hot'}


def _btf(obj: Path) -> bytes:
    with ElfFile.open(str(obj)) as elf:
        return elf.section_data(elf.section_by_name('.BTF'))


def test_linker_resolves_same_name_statics_and_subsections(tmp_path):
    """After a real link, every DATASEC entry holds its own variable's address."""
    assert_linked_offsets(tmp_path, encoded_counters(tmp_path))


def assert_linked_offsets(tmp_path: Path, objs: list[Path]) -> None:
    """Link the encoded counter_a.o and counter_b.o with ld: each DATASEC
    entry of each blob then holds its own variable's address (low 32 bits)."""
    linked = tmp_path / 'linked'
    run(need('ld'), '-o', linked, '-e', 'bump_a', *objs)
    with ElfFile.open(str(linked)) as elf:
        blobs = [bytes(b.data) for b in split_blobs(elf.section_data(elf.section_by_name('.BTF')))]
        symbols = elf.symbols()
    assert len(blobs) == 2
    # Local symbols of each object appear after its FILE symbol, in link order.
    per_file: list[dict[str, int]] = []
    for s in symbols:
        if s.type == 4:
            per_file.append({})
        elif s.type == 1 and per_file:
            per_file[-1][s.name] = s.value
    seen = 0
    for blob, addresses in zip(blobs, per_file):
        btf = parse_btf(blob)
        for _, t in btf.own():
            if t.kind is Kind.DATASEC:
                for v in t.items:
                    name = btf[v.type].name
                    assert v.offset == addresses[name] & 0xffffffff, (t.name, name)
                    seen += 1
    assert seen == 5
    counters = [a['counter'] for a in per_file]
    assert counters[0] != counters[1]


def test_lief_reads_the_rewritten_object(tmp_path):
    """An independent ELF parser sees the new sections and relocations as objbtf wrote them."""
    import lief
    obj = compile_c('gcc', C_FIXTURES / 'counter_b.c', tmp_path / 'b.o')
    objbtf('encode', obj)
    elf = lief.ELF.parse(str(obj))
    btf = elf.get_section('.BTF')
    rela = elf.get_section('.rela.BTF')
    assert btf is not None and rela is not None
    assert bytes(btf.content) == _btf(obj)
    assert rela.information == [i for i, s in enumerate(elf.sections) if s.name == '.BTF'][0]
    names = sorted(r.symbol.name for r in elf.object_relocations
                   if r.section is not None and r.section.name == '.BTF')
    assert names == ['counter', 'hot', 'pad']
