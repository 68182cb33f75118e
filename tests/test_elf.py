"""objbtf.elf against real compilers, with readelf, ld and pyelftools as oracles."""
from __future__ import annotations

import os
import random
import re
import resource
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from objbtf.elf import (ElfError, ElfFile, NewSection, Reloc, apply_relocations, arch_for,
                        remove_sections, rewrite_object, section_symbol_index)
from objbtf.elf.consts import (EM_386, EM_X86_64, ET_REL, SHF_COMPRESSED, SHF_INFO_LINK,
                               SHN_ABS, SHN_COMMON, SHT_NOBITS, SHT_REL, SHT_RELA,
                               SHT_STRTAB, SHT_SYMTAB, STT_SECTION)

FIXTURES = Path(__file__).parent / 'fixtures' / 'elf'

VARIANTS = {
    'gcc-dwarf4': ['gcc', '-g', '-gdwarf-4'],
    # -gno-record-gcc-switches: the same DW_AT_producer with and without -gz
    'gcc-dwarf5': ['gcc', '-g', '-gdwarf-5', '-O2', '-gno-record-gcc-switches'],
    'gcc-gz': ['gcc', '-g', '-gdwarf-5', '-O2', '-gno-record-gcc-switches', '-gz'],
    'gcc-zdebug': ['gcc', '-g', '-gdwarf-5', '-O2', '-gno-record-gcc-switches',
                   '-gz=zlib-gnu'],
    'gcc-sections': ['gcc', '-g', '-O2', '-ffunction-sections', '-fdata-sections'],
    'clang-dwarf4': ['clang', '-g', '-gdwarf-4'],
    'clang-dwarf5': ['clang', '-g', '-gdwarf-5', '-O2'],
    'clang-gz': ['clang', '-g', '-gdwarf-5', '-O2', '-gz'],
    'gcc-m32': ['gcc', '-m32', '-g', '-O2'],
    'clang-m32': ['clang', '-m32', '-g', '-gdwarf-5', '-O2'],
    'clang-aarch64': ['clang', '--target=aarch64-linux-gnu', '-g', '-O2'],
    'clang-s390x': ['clang', '--target=s390x-linux-gnu', '-g', '-O2'],   # big-endian
}
HOST64 = ['gcc-dwarf4', 'gcc-dwarf5', 'gcc-gz', 'gcc-sections', 'clang-dwarf4',
          'clang-dwarf5', 'clang-gz']
HOST32 = ['gcc-m32', 'clang-m32']
# pyelftools does not read the legacy .zdebug sections; gcc-zdebug is checked
# against gcc-dwarf5 instead.
PYELFTOOLS_VARIANTS = [v for v in VARIANTS if v != 'gcc-zdebug']
DWARF_ATTRS = ['debug_info_sec', 'debug_abbrev_sec', 'debug_line_sec', 'debug_addr_sec',
               'debug_str_offsets_sec', 'debug_rnglists_sec', 'debug_loclists_sec',
               'debug_aranges_sec', 'debug_loc_sec', 'debug_ranges_sec', 'debug_frame_sec']


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, f'{cmd}: {proc.stderr}'
    return proc.stdout


@pytest.fixture(scope='session')
def build(tmp_path_factory):
    """build(variant, source='sample.c') -> path of the object, compiled once."""
    out_dir = tmp_path_factory.mktemp('objs')
    cache: dict[tuple[str, str], Path] = {}

    def _build(variant: str, source: str = 'sample.c') -> Path:
        key = (variant, source)
        if key not in cache:
            out = out_dir / f'{variant}-{Path(source).stem}.o'
            cmd = [*VARIANTS[variant], '-c', str(FIXTURES / source), '-o', str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            assert proc.returncode == 0, f'{cmd}: {proc.stderr}'
            cache[key] = out
        return cache[key]
    return _build


def fresh(build, tmp_path: Path, variant: str) -> Path:
    """A writable copy of a variant's object."""
    path = tmp_path / f'{variant}.o'
    path.write_bytes(build(variant).read_bytes())
    return path


def load(path: Path) -> ElfFile:
    return ElfFile(path.read_bytes(), str(path))


# --- readelf as the oracle -------------------------------------------------

_SEC_RE = re.compile(r'^\s*\[\s*(\d+)\] (.*?)\s+(SYMTAB SECTION INDICES|\S+)\s+([0-9a-f]+) '
                     r'([0-9a-f]+) ([0-9a-f]+) ([0-9a-f]+)\s+([A-Za-z]*)\s+(\d+)\s+(\d+)\s+(\d+)$')
_TYPE_NAMES = {0: 'NULL', 1: 'PROGBITS', 2: 'SYMTAB', 3: 'STRTAB', 4: 'RELA', 7: 'NOTE',
               8: 'NOBITS', 9: 'REL', 17: 'GROUP', 18: 'SYMTAB SECTION INDICES'}
_FLAG_LETTERS = {0x1: 'W', 0x2: 'A', 0x4: 'X', 0x10: 'M', 0x20: 'S', 0x40: 'I', 0x80: 'L',
                 0x100: 'O', 0x200: 'G', 0x400: 'T', 0x800: 'C', 0x80000000: 'E'}
_SYM_TYPES = {'NOTYPE': 0, 'OBJECT': 1, 'FUNC': 2, 'SECTION': 3, 'FILE': 4, 'COMMON': 5,
              'TLS': 6}
_SYM_BINDS = {'LOCAL': 0, 'GLOBAL': 1, 'WEAK': 2}
_SPECIAL_NDX = {'UND': 0, 'ABS': SHN_ABS, 'COM': SHN_COMMON}


def readelf_sections(path: Path) -> list[tuple]:
    rows = []
    for line in run('readelf', '-SW', path).splitlines():
        m = _SEC_RE.match(line)
        if m:
            idx, name, typ, addr, off, size, es, flg, lk, inf, al = m.groups()
            rows.append((int(idx), name, typ, int(addr, 16), int(off, 16), int(size, 16),
                         int(es, 16), set(flg), int(lk), int(inf), int(al)))
    return rows


def readelf_symbols(path: Path) -> list[tuple]:
    rows = []
    for line in run('readelf', '-sW', path).splitlines():
        parts = line.split(None, 7)
        if len(parts) >= 7 and re.fullmatch(r'\d+:', parts[0]):
            num, value, size, typ, bind, _vis, ndx, *name = parts
            rows.append((int(num[:-1]), name[0] if name else '', int(value, 16),
                         int(size, 0), _SYM_TYPES[typ], _SYM_BINDS[bind],
                         _SPECIAL_NDX.get(ndx) if ndx in _SPECIAL_NDX else int(ndx)))
    return rows


def readelf_relocs(path: Path) -> dict[str, list[tuple[int, str, str]]]:
    """section name -> [(offset, type name, rest of the line)]."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in run('readelf', '-rW', path).splitlines():
        head = re.match(r"Relocation section '([^']+)'", line)
        if head:
            current = out.setdefault(head.group(1), [])
        elif current is not None and re.match(r'[0-9a-f]{8,16}\s', line):
            off, _info, typ, *rest = line.split(None, 3)
            current.append((int(off, 16), typ, ' '.join(rest)))
    return out


def pyelftools_relocated(path: Path) -> dict[str, bytes]:
    """Debug sections with relocations applied by pyelftools (the slow oracle)."""
    from elftools.elf.elffile import ELFFile
    with open(path, 'rb') as f:
        dwarf = ELFFile(f).get_dwarf_info(relocate_dwarf_sections=True)
        return {sec.name: sec.stream.getvalue() for attr in DWARF_ATTRS
                if (sec := getattr(dwarf, attr, None)) is not None}


# --- reading ---------------------------------------------------------------

@pytest.mark.parametrize('variant', VARIANTS)
def test_sections_match_readelf(build, variant):
    path = build(variant)
    elf = load(path)
    expected = readelf_sections(path)
    assert len(expected) == len(elf.sections) > 5
    for sec, (idx, name, typ, addr, off, size, es, flg, lk, inf, al) in zip(elf.sections,
                                                                            expected):
        assert (sec.index, sec.name, sec.addr, sec.offset, sec.size, sec.entsize,
                sec.link, sec.info, sec.addralign) == (idx, name, addr, off, size, es,
                                                       lk, inf, al)
        if sec.type in _TYPE_NAMES:
            assert _TYPE_NAMES[sec.type] == typ, name
        letters = {c for bit, c in _FLAG_LETTERS.items() if sec.flags & bit}
        assert letters == flg, name
        assert elf.section_by_name(sec.name).name == sec.name


@pytest.mark.parametrize('variant', VARIANTS)
def test_header_fields(build, variant):
    elf = load(build(variant))
    header = run('readelf', '-hW', build(variant))
    assert elf.e_type == ET_REL
    assert f'ELF{elf.elf_class}' in header
    assert (elf.byteorder == 'big') == ('big endian' in header)
    assert elf.machine == {'clang-aarch64': 183, 'clang-s390x': 22}.get(
        variant, EM_386 if variant in HOST32 else EM_X86_64)


@pytest.mark.parametrize('variant', VARIANTS)
def test_symbols_match_readelf(build, variant):
    path = build(variant)
    elf = load(path)
    expected = readelf_symbols(path)
    got = elf.symbols()
    assert len(got) == len(expected) > 5
    for sym, (num, name, value, size, typ, bind, ndx) in zip(got, expected):
        assert (sym.index, sym.value, sym.size, sym.type, sym.bind, sym.shndx) == \
            (num, value, size, typ, bind, ndx)
        # readelf names section symbols after their section
        assert sym.name == name or (sym.type == STT_SECTION and not sym.name)


@pytest.mark.parametrize('variant', VARIANTS)
def test_section_symbols_match_readelf(build, variant):
    """section_symbols reads the table itself (fresh file), then filters the
    full list (once it is built): readelf's symbols of each section, either way."""
    path = build(variant)
    expected = readelf_symbols(path)
    for how in ('direct', 'from the full list'):
        elf = load(path)
        if how != 'direct':
            elf.symbols()
        for sec in elf.sections:
            got = [(s.index, s.value, s.shndx) for s in elf.section_symbols(sec)]
            assert got == [(num, value, ndx) for num, _, value, _, _, _, ndx in expected
                           if ndx == sec.index], (how, sec.name)


@pytest.mark.parametrize('variant', PYELFTOOLS_VARIANTS)
def test_relocations_match_pyelftools(build, variant):
    from elftools.elf.elffile import ELFFile
    path = build(variant)
    elf = load(path)
    with open(path, 'rb') as f:
        oracle = ELFFile(f)
        relsecs = [s for s in elf.sections if s.type in (SHT_REL, SHT_RELA)]
        assert relsecs
        for sec in relsecs:
            theirs = [(r['r_offset'], r['r_info_sym'], r['r_info_type'],
                       r['r_addend'] if sec.type == SHT_RELA else 0)
                      for r in oracle.get_section(sec.index).iter_relocations()]
            assert elf.relocations(sec) == theirs, sec.name
            assert elf.reloc_section_for(sec.info) == sec


@pytest.mark.parametrize('variant', PYELFTOOLS_VARIANTS)
def test_apply_relocations_matches_pyelftools(build, variant):
    path = build(variant)
    elf = load(path)
    oracle = pyelftools_relocated(path)
    assert '.debug_info' in oracle
    relocated = 0
    for name, data in oracle.items():
        sec = elf.section_by_name(name)
        relocated += elf.reloc_section_for(sec.index) is not None
        assert apply_relocations(elf, sec) == data, name
    assert relocated >= 2


def test_legacy_zdebug_matches_plain(build):
    """-gz=zlib-gnu gives .zdebug_* sections holding the same DWARF as -g."""
    plain, zdebug = load(build('gcc-dwarf5')), load(build('gcc-zdebug'))
    names = [s.name for s in zdebug.sections if s.name.startswith('.zdebug_')]
    assert '.zdebug_info' in names
    for name in names:
        ours = zdebug.section_by_name(name)
        theirs = plain.section_by_name('.debug_' + name[len('.zdebug_'):])
        assert zdebug.section_data(ours) == plain.section_data(theirs)
        assert apply_relocations(zdebug, ours) == apply_relocations(plain, theirs)


@pytest.mark.parametrize('plain,compressed', [('gcc-dwarf5', 'gcc-gz'),
                                              ('clang-dwarf5', 'clang-gz')])
def test_compressed_sections_decompress(build, plain, compressed):
    a, b = load(build(plain)), load(build(compressed))
    packed = [s for s in b.sections if s.flags & SHF_COMPRESSED]
    assert packed
    for sec in packed:
        assert b.section_data(sec) == a.section_data(a.section_by_name(sec.name))


@pytest.mark.parametrize('variant', ['gcc-dwarf5', 'clang-dwarf5', 'gcc-m32'])
def test_tls_offsets_are_applied(build, variant):
    """DTPOFF-style relocations (not known to pyelftools) resolve to S + A."""
    elf = load(build(variant, 'tls.c'))
    info = elf.section_by_name('.debug_info')
    relsec = elf.reloc_section_for(info.index)
    rels = elf.relocations(relsec)
    tls_types = {21, 17} if elf.machine == EM_X86_64 else {32}
    tls = [r for r in rels if r[2] in tls_types]
    assert tls
    data = apply_relocations(elf, info)
    raw = elf.section_data(info)
    syms = elf.symbols()
    for off, sym, rtype, addend in tls:
        width = 8 if rtype == 17 else 4
        implicit = int.from_bytes(raw[off:off + 4], 'little') if relsec.type == SHT_REL else 0
        assert int.from_bytes(data[off:off + width], 'little') == \
            syms[sym].value + addend + implicit


def test_unknown_machine_is_a_clear_error(build):
    data = bytearray(build('gcc-dwarf5').read_bytes())
    struct.pack_into('<H', data, 18, 0x1234)
    elf = ElfFile(bytes(data))
    with pytest.raises(ElfError, match='unsupported machine 4660'):
        apply_relocations(elf, elf.section_by_name('.debug_info'))


def test_pc_relative_relocation_is_rejected(build):
    elf = load(build('gcc-dwarf5'))
    eh = elf.section_by_name('.eh_frame')
    with pytest.raises(ElfError, match='PC-relative R_X86_64_PC32'):
        apply_relocations(elf, eh)


def test_open_maps_lazily(build, tmp_path):
    """A 3 GB (sparse) file opens and serves one section without being read."""
    src = build('gcc-dwarf5')
    orig = load(src)
    info = orig.section_by_name('.debug_info')
    far = 3 << 30
    data = bytearray(src.read_bytes())
    shdr = orig.layout.shdr
    fields = list(shdr.unpack_from(data, orig.e_shoff + info.index * shdr.size))
    fields[4] = far
    shdr.pack_into(data, orig.e_shoff + info.index * shdr.size, *fields)
    big = tmp_path / 'big.o'
    with open(big, 'wb') as f:
        f.write(data)
        f.seek(far)
        f.write(orig.section_data(info))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ElfFile.open(str(big)) as elf:
        sec = elf.section_by_name('.debug_info')
        assert sec.offset == far
        assert apply_relocations(elf, sec) == apply_relocations(orig, info)
        assert len(elf.symbols()) == len(orig.symbols())
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000   # KiB


@pytest.mark.kernel
def test_kernel_fork_o_relocations_right(kernel_build):
    """kernel/fork.o: 10.5 k relocations in .debug_info, applied in bulk as
    pyelftools applies them one by one (how fast: bench/encode_bench.py)."""
    fork_o = kernel_build / 'kernel' / 'fork.o'
    with ElfFile.open(str(fork_o)) as elf:
        info = elf.section_by_name('.debug_info')
        assert len(elf.relocations(elf.reloc_section_for(info.index))) > 10_000
        ours = apply_relocations(elf, info)
    assert ours == pyelftools_relocated(fork_o)['.debug_info']


# --- malformed input --------------------------------------------------------

def exercise(data: bytes) -> None:
    """Everything a caller may ask of a file; only ElfError may come out."""
    elf = ElfFile(data, 'bad.o')
    elf.symbols()
    for sec in elf.sections:
        elf.section_by_name(sec.name)
        elf.section_data(sec)
        if sec.type in (SHT_REL, SHT_RELA):
            elf.relocations(sec)
            if 0 < sec.info < len(elf.sections) and elf.sections[sec.info].name.startswith(
                    ('.debug', '.zdebug')):
                apply_relocations(elf, elf.sections[sec.info])


def survives(data: bytes) -> bool:
    try:
        exercise(data)
    except ElfError as exc:
        assert str(exc)
        return False
    return True


@pytest.mark.parametrize('variant', ['gcc-dwarf5', 'gcc-gz', 'gcc-zdebug', 'clang-gz',
                                     'gcc-m32', 'clang-s390x'])
def test_truncated_files_raise_elf_error(build, variant):
    data = build(variant).read_bytes()
    assert survives(data)
    cuts = sorted({0, 1, 3, 4, 15, 16, 40, 51, 52, 63, 64, 100, len(data) // 3,
                   len(data) // 2, len(data) - 100, len(data) - 1})
    for cut in cuts:
        assert not survives(data[:cut]), cut


@pytest.mark.parametrize('variant', ['gcc-dwarf5', 'gcc-gz', 'clang-gz', 'gcc-m32',
                                     'clang-s390x', 'gcc-zdebug'])
def test_corrupted_files_only_raise_elf_error(build, variant):
    """Random byte changes in the headers and tables: never another exception."""
    data = build(variant).read_bytes()
    elf = ElfFile(data)
    regions = [(0, elf.layout.ehdr.size),
               (elf.e_shoff, len(elf.sections) * elf.layout.shdr.size)]
    regions += [(s.offset, s.size) for s in elf.sections
                if s.type in (SHT_SYMTAB, SHT_STRTAB, SHT_REL, SHT_RELA) or s.flags & SHF_COMPRESSED
                or s.name.startswith('.zdebug')]
    rng = random.Random(variant)
    for _ in range(400):
        mutated = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 4))):
            start, size = rng.choice(regions)
            mutated[start + rng.randrange(size)] = rng.randrange(256)
        survives(bytes(mutated))


def test_random_bytes_raise_elf_error():
    rng = random.Random(1)
    for n in (0, 5, 16, 64, 1000):
        assert not survives(bytes(rng.randrange(256) for _ in range(n)))
    with pytest.raises(ElfError, match='bad magic'):
        ElfFile(b'\x7fELG' + bytes(100))
    with pytest.raises(ElfError, match='class'):
        ElfFile(b'\x7fELF\x03\x01' + bytes(100))


def _patched_shdr(build, variant: str, name: str, field: int, value: int) -> bytes:
    """The object with one field of one section header replaced."""
    path = build(variant)
    elf = load(path)
    data = bytearray(path.read_bytes())
    shdr = elf.layout.shdr
    where = elf.e_shoff + elf.section_by_name(name).index * shdr.size
    fields = list(shdr.unpack_from(data, where))
    fields[field] = value
    shdr.pack_into(data, where, *fields)
    return bytes(data)


def _patched_ehdr(build, variant: str, field: int, value: int) -> bytes:
    path = build(variant)
    elf = load(path)
    data = bytearray(path.read_bytes())
    fields = list(elf.layout.ehdr.unpack_from(data))
    fields[field] = value
    elf.layout.ehdr.pack_into(data, 0, *fields)
    return bytes(data)


def test_specific_corruptions_have_clear_messages(build):
    v = 'gcc-dwarf5'
    size = len(build(v).read_bytes())
    cases = [
        (_patched_ehdr(build, v, 6, size + 8), 'section header table'),       # e_shoff
        (_patched_ehdr(build, v, 12, 5000), 'runs past the end'),             # e_shnum
        (_patched_ehdr(build, v, 13, 500), 'bad e_shstrndx 500'),
        (_patched_ehdr(build, v, 11, 12), 'section header size 12'),
        (_patched_shdr(build, v, '.debug_info', 4, size), 'runs past the end of the file'),
        (_patched_shdr(build, v, '.text', 0, 1 << 20), 'section name offset'),
        (_patched_shdr(build, v, '.rela.debug_info', 9, 7), 'entry size 7'),
        (_patched_shdr(build, v, '.symtab', 6, 999), 'bad sh_link 999'),
        (_patched_shdr(build, v, '.rela.debug_info', 6, 1), 'not a symbol table'),
    ]
    for data, message in cases:
        with pytest.raises(ElfError, match=message):
            exercise(data)


def test_bad_compressed_data(build):
    path = build('gcc-gz')
    elf = load(path)
    sec = elf.section_by_name('.debug_info')
    assert sec.flags & SHF_COMPRESSED
    data = bytearray(path.read_bytes())
    data[sec.offset + 30: sec.offset + 40] = b'\xff' * 10
    with pytest.raises(ElfError, match='section .debug_info: (bad compressed data|'
                                       'decompressed to)'):
        ElfFile(bytes(data)).section_data(sec)
    data = bytearray(path.read_bytes())
    struct.pack_into('<I', data, sec.offset, 2)
    with pytest.raises(ElfError, match='compression type 2 \\(zstd\\)'):
        ElfFile(bytes(data)).section_data(sec)


def test_relocation_symbol_out_of_range(build):
    path = build('gcc-dwarf5')
    elf = load(path)
    relsec = elf.section_by_name('.rela.debug_info')
    data = bytearray(path.read_bytes())
    struct.pack_into('<Q', data, relsec.offset + 24 * 3 + 8, 5000 << 32 | 10)
    bad = ElfFile(bytes(data))
    with pytest.raises(ElfError, match='relocation 3 of .rela.debug_info refers to '
                                       'symbol 5000'):
        bad.relocations(relsec)
    with pytest.raises(ElfError, match='symbol 5000'):
        apply_relocations(bad, bad.section_by_name('.debug_info'))


def test_relocation_offset_out_of_range(build):
    path = build('gcc-dwarf5')
    elf = load(path)
    relsec = elf.section_by_name('.rela.debug_info')
    data = bytearray(path.read_bytes())
    struct.pack_into('<Q', data, relsec.offset, 1 << 40)
    bad = ElfFile(bytes(data))
    with pytest.raises(ElfError, match='relocation at 0x10000000000 is outside'):
        apply_relocations(bad, bad.section_by_name('.debug_info'))


def pointers_to_statics(tmp_path: Path, variant: str) -> Path:
    """An object of ``variant`` with two pointers to statics, relocated
    against the statics' section symbol."""
    source = tmp_path / 'pointers.c'
    source.write_text('static int first[3], second;\n'
                      'int *where_first = first, *where_second = &second;\n')
    obj = tmp_path / 'pointers.o'
    run(*VARIANTS[variant], '-c', source, '-o', obj)
    return obj


@pytest.mark.parametrize('variant', ['gcc-dwarf5', 'gcc-m32', 'clang-s390x'])
def test_relocations_by_field_give_each_pointer_its_target(build, tmp_path, variant):
    """The assembler relocates a pointer to a static against its section's
    symbol with the static's offset as the addend: in the entry (RELA) or
    in the field (REL, i386). Either way, symbol value plus addend must be
    the static's own symbol's value, which the symbol table gives."""
    elf = load(pointers_to_statics(tmp_path, variant))
    symbols = elf.symbols()
    by_name = {s.name: s for s in symbols if s.name}
    data = elf.sections[by_name['where_first'].shndx]      # .data, or .data.rel.local (PIE)
    width = elf.pointer_size
    fields = elf.relocations_by_field(data, width)
    assert sorted(fields) == sorted([by_name['where_first'].value, by_name['where_second'].value])
    for field, target in ((by_name['where_first'].value, 'first'),
                          (by_name['where_second'].value, 'second')):
        symbol, addend = fields[field]
        assert symbols[symbol].shndx == by_name[target].shndx
        assert symbols[symbol].value + addend == by_name[target].value, (field, target)
    assert any(addend for _symbol, addend in fields.values())   # not all placed at 0
    kinds = {rtype for _o, _s, rtype, _a in elf.relocations(elf.reloc_section_for(data.index))}
    assert elf.relocations_by_field(data, width, frozenset(kinds)) == fields
    assert elf.relocations_by_field(data, width, frozenset()) == {}


def test_a_rel_field_past_its_section_is_an_error(build, tmp_path):
    obj = pointers_to_statics(tmp_path, 'gcc-m32')
    elf = load(obj)
    pointers = next(s for s in elf.symbols() if s.name == 'where_first').shndx
    name = elf.sections[pointers].name
    data = bytearray(obj.read_bytes())
    shdr = elf.layout.shdr
    where = elf.e_shoff + pointers * shdr.size
    fields = list(shdr.unpack_from(data, where))
    fields[5] = 6                   # sh_size: the field at 4 to 8 is cut
    shdr.pack_into(data, where, *fields)
    bad = ElfFile(bytes(data), 'bad.o')
    with pytest.raises(ElfError, match=f'a relocation of .rel{name} is past the end of {name}$'):
        bad.relocations_by_field(bad.sections[pointers], 4)


def test_empty_file(tmp_path):
    path = tmp_path / 'empty.o'
    path.write_bytes(b'')
    with pytest.raises(ElfError, match='empty'):
        ElfFile.open(str(path))


# --- extended section numbering ---------------------------------------------

@pytest.fixture(scope='session')
def many_sections(tmp_path_factory) -> Path:
    """An object with more than 0xff00 sections (extended numbering, SHN_XINDEX)."""
    d = tmp_path_factory.mktemp('many')
    src = d / 'many.s'
    with open(src, 'w') as f:
        for i in range(65300):
            f.write(f'.section .s{i},"a"\n.byte {i & 255}\n')
        f.write('.globl last\nlast: .byte 1\n.data\n.globl first\nfirst: .quad last\n')
    run('as', '--64', '-o', d / 'many.o', src)
    return d / 'many.o'


def test_extended_numbering(many_sections, tmp_path):
    elf = load(many_sections)
    assert len(elf.sections) > 0xff00
    assert elf.shstrndx >= 0xff00
    expected = readelf_sections(many_sections)
    assert [(s.index, s.name, s.offset, s.size) for s in elf.sections] == \
        [(r[0], r[1], r[4], r[5]) for r in expected]
    last = next(s for s in elf.symbols() if s.name == 'last')
    assert elf.sections[last.shndx].name == '.s65299'
    # SHN_XINDEX resolved before filtering, reading the table anew
    assert [s.name for s in load(many_sections).section_symbols(elf.sections[last.shndx])
            if s.type != STT_SECTION] == ['last']

    path = tmp_path / 'many.o'
    path.write_bytes(many_sections.read_bytes())
    arch = arch_for(elf)
    rewrite_object(str(path), elf, [NewSection('.BTF', bytes(8))],
                   {'.BTF': [Reloc(0, last.index, arch.abs32, 0)]})
    new = load(path)
    assert new.sections[-2].name == '.BTF' and new.sections[-1].name == '.rela.BTF'
    [(off, typ, rest)] = readelf_relocs(path)['.rela.BTF']
    assert (off, typ, rest.split()[1:]) == (0, 'R_X86_64_32S', ['last', '+', '0'])
    run('ld', '-r', '-o', tmp_path / 'out.o', path)


# --- writing -----------------------------------------------------------------

BTF = bytes(12) + b'objbtf payload tail'


def symbol_index(elf: ElfFile, name: str) -> int:
    return next(s.index for s in elf.symbols() if s.name == name)


def add_btf(path: Path, data: bytes = BTF) -> None:
    """Add .BTF with three 32-bit address relocations, as objbtf will."""
    elf = load(path)
    arch = arch_for(elf)
    relocs = [Reloc(0, symbol_index(elf, 'origin'), arch.abs32, 0),
              Reloc(4, symbol_index(elf, 'table'), arch.abs32, 8),
              Reloc(8, symbol_index(elf, 'percpu_var'), arch.abs32, 0)]
    rewrite_object(str(path), elf, [NewSection('.BTF', data, addralign=4)], {'.BTF': relocs})


def assert_old_sections_intact(old: ElfFile, new: ElfFile) -> None:
    for sec in old.sections:
        if sec.index == old.shstrndx:
            assert new.section_data(new.sections[sec.index]).startswith(old.section_data(sec))
            continue
        assert new.sections[sec.index] == sec
        if sec.type != SHT_NOBITS:
            assert new.data[sec.offset:sec.offset + sec.size] == \
                old.data[sec.offset:sec.offset + sec.size]


def no_temp_files(directory: Path) -> bool:
    return not [p for p in os.listdir(directory) if p.startswith('.objbtf-')]


@pytest.mark.parametrize('variant', HOST64)
def test_add_btf_section(build, tmp_path, variant):
    path = fresh(build, tmp_path, variant)
    old = load(path)
    add_btf(path)
    new = load(path)
    assert_old_sections_intact(old, new)
    btf, rela = new.sections[-2], new.sections[-1]
    assert (btf.name, rela.name) == ('.BTF', '.rela.BTF')
    assert new.section_data(btf) == BTF
    assert (rela.type, rela.flags, rela.link, rela.info, rela.entsize) == \
        (SHT_RELA, SHF_INFO_LINK, new.symtab().index, btf.index, 24)

    sections = {r[1]: r for r in readelf_sections(path)}
    assert sections['.BTF'][5] == len(BTF)
    relocs = readelf_relocs(path)['.rela.BTF']
    assert [(off, typ, rest.split()[1]) for off, typ, rest in relocs] == [
        (0, 'R_X86_64_32S', 'origin'), (4, 'R_X86_64_32S', 'table'),
        (8, 'R_X86_64_32S', 'percpu_var')]
    assert relocs[1][2].endswith('+ 8')

    # Linking resolves the relocations to the symbols' addresses.
    run('ld', '-r', '-o', tmp_path / 'partial.o', path)
    assert load(tmp_path / 'partial.o').section_by_name('.rela.BTF') is not None
    main_o = tmp_path / 'main.o'
    run('gcc', '-c', FIXTURES / 'main.c', '-o', main_o)
    run('gcc', '-no-pie', '-o', tmp_path / 'prog', path, main_o)
    run(tmp_path / 'prog')
    check_linked_btf(load(tmp_path / 'prog'), '<', signed=True)


def check_linked_btf(prog: ElfFile, e: str, signed: bool) -> None:
    """The linked .BTF holds origin, table + 8 and percpu_var's addresses."""
    data = prog.section_data(prog.section_by_name('.BTF'))
    addr = {s.name: s.value for s in prog.symbols()}
    fields = struct.unpack_from(e + ('iii' if signed else 'III'), data)
    mask = 0xffffffff
    assert [f & mask for f in fields] == [addr['origin'] & mask, (addr['table'] + 8) & mask,
                                          addr['percpu_var'] & mask]
    assert data[12:] == BTF[12:]


@pytest.mark.parametrize('variant', HOST32)
def test_add_btf_section_rel(build, tmp_path, variant):
    """i386 uses REL: the addend goes into the section data."""
    path = fresh(build, tmp_path, variant)
    old = load(path)
    add_btf(path)
    new = load(path)
    assert_old_sections_intact(old, new)
    btf, rel = new.sections[-2], new.sections[-1]
    assert (btf.name, rel.name, rel.type, rel.entsize) == ('.BTF', '.rel.BTF', SHT_REL, 8)
    data = new.section_data(btf)
    assert struct.unpack_from('<III', data) == (0, 8, 0)
    assert data[12:] == BTF[12:]
    relocs = readelf_relocs(path)['.rel.BTF']
    assert [(off, typ, rest.split()[1]) for off, typ, rest in relocs] == [
        (0, 'R_386_32', 'origin'), (4, 'R_386_32', 'table'), (8, 'R_386_32', 'percpu_var')]
    run('ld', '-m', 'elf_i386', '-r', '-o', tmp_path / 'partial.o', path)
    run('ld', '-m', 'elf_i386', '-e', 'add', '-o', tmp_path / 'prog', path)
    check_linked_btf(load(tmp_path / 'prog'), '<', signed=False)


@pytest.mark.parametrize('variant', ['gcc-dwarf5', 'clang-gz', 'gcc-m32'])
def test_rewrite_is_deterministic(build, tmp_path, variant):
    path = fresh(build, tmp_path, variant)
    add_btf(path)
    first = path.read_bytes()
    add_btf(path)
    assert path.read_bytes() == first
    other = tmp_path / 'other.o'
    other.write_bytes(build(variant).read_bytes())
    add_btf(other)
    assert other.read_bytes() == first


def test_replace_without_relocations_empties_them(build, tmp_path):
    path = fresh(build, tmp_path, 'gcc-dwarf5')
    add_btf(path)
    before = load(path)
    rewrite_object(str(path), before, [NewSection('.BTF', b'short')])
    after = load(path)
    assert len(after.sections) == len(before.sections)
    btf = after.section_by_name('.BTF')
    assert btf.index == before.section_by_name('.BTF').index
    assert after.section_data(btf) == b'short'
    rela = after.reloc_section_for(btf.index)
    assert rela.name == '.rela.BTF' and rela.size == 0
    assert after.relocations(rela) == []
    assert not readelf_relocs(path).get('.rela.BTF')
    run('ld', '-r', '-o', tmp_path / 'partial.o', path)
    # and back: the relocation section is filled again in place
    add_btf(path)
    assert load(path).section_by_name('.rela.BTF').index == rela.index
    assert len(readelf_relocs(path)['.rela.BTF']) == 3


def test_replace_existing_section_and_its_relocations(build, tmp_path):
    """Replace a data section with relocations in place: indices stay, relocations follow."""
    path = fresh(build, tmp_path, 'gcc-dwarf5')
    old = load(path)
    data_sec = old.section_by_name('.data.rel.local')
    rela = old.reloc_section_for(data_sec.index)
    relocs = [Reloc(*r) for r in old.relocations(rela)]
    assert relocs
    new_data = NewSection(data_sec.name, old.section_data(data_sec), flags=data_sec.flags,
                          addralign=data_sec.addralign)

    rewrite_object(str(path), old, [new_data])
    emptied = load(path)
    assert len(emptied.sections) == len(old.sections)
    assert emptied.sections[rela.index].size == 0

    rewrite_object(str(path), emptied, [new_data], {data_sec.name: relocs})
    new = load(path)
    assert len(new.sections) == len(old.sections)
    assert new.sections[data_sec.index].name == data_sec.name
    assert new.relocations(new.sections[rela.index]) == old.relocations(rela)
    for sec in old.sections:
        if sec.index not in (data_sec.index, rela.index):
            assert new.section_data(new.sections[sec.index]) == old.section_data(sec)
    main_o = tmp_path / 'main.o'
    run('gcc', '-c', FIXTURES / 'main.c', '-o', main_o)
    run('gcc', '-no-pie', '-o', tmp_path / 'prog', path, main_o)
    run(tmp_path / 'prog')


def test_new_section_link_and_info(build, tmp_path):
    path = fresh(build, tmp_path, 'clang-dwarf5')
    rewrite_object(str(path), load(path), [
        NewSection('.objbtf.a', b'abc', link='symtab', info='.objbtf.b', addralign=8),
        NewSection('.objbtf.b', b'', type=SHT_NOBITS, flags=3)])
    new = load(path)
    rows = {r[1]: r for r in readelf_sections(path)}
    b = new.section_by_name('.objbtf.b')
    assert rows['.objbtf.a'][8:] == (new.symtab().index, b.index, 8)
    assert rows['.objbtf.a'][4] % 8 == 0
    assert rows['.objbtf.b'][2] == 'NOBITS' and rows['.objbtf.b'][7] == {'W', 'A'}
    run('ld', '-r', '-o', tmp_path / 'partial.o', path)


def test_rewrite_with_mmapped_file_preserves_mode(build, tmp_path):
    path = fresh(build, tmp_path, 'gcc-gz')
    os.chmod(path, 0o640)
    with ElfFile.open(str(path)) as elf:
        rewrite_object(str(path), elf, [NewSection('.BTF', BTF)])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert load(path).section_data(load(path).section_by_name('.BTF')) == BTF
    assert no_temp_files(tmp_path)


def test_failed_rewrite_leaves_file_untouched(build, tmp_path, monkeypatch):
    path = fresh(build, tmp_path, 'gcc-dwarf5')
    original = path.read_bytes()
    elf = load(path)
    arch = arch_for(elf)
    bad_calls = [
        ({'.BTF': [Reloc(0, 10_000, arch.abs32, 0)]}, 'symbol 10000 out of range'),
        ({'.BTF': [Reloc(len(BTF) - 2, 1, arch.abs32, 0)]}, 'outside the 31-byte section'),
        ({'.BTF': [Reloc(0, 1, 999, 0)]}, 'unsupported x86_64 relocation type 999'),
        ({'.nope': [Reloc(0, 1, arch.abs32, 0)]}, 'no section .nope'),
        ({'.BTF': [Reloc(0, 1, arch.abs32, 1 << 63)]}, 'addend 9223372036854775808 '
                                                        'does not fit'),
    ]
    for relocs, message in bad_calls:
        with pytest.raises(ElfError, match=message):
            rewrite_object(str(path), elf, [NewSection('.BTF', BTF)], relocs)
    with pytest.raises(ElfError, match='given twice'):
        rewrite_object(str(path), elf, [NewSection('.BTF', BTF), NewSection('.BTF', b'')])
    with pytest.raises(ElfError, match='section name table'):
        rewrite_object(str(path), elf, [NewSection('.shstrtab', b'')])

    def failing_replace(src, dst, **dir_fds):
        raise OSError('disk full')
    monkeypatch.setattr(os, 'replace', failing_replace)
    with pytest.raises(OSError, match='disk full'):
        rewrite_object(str(path), elf, [NewSection('.BTF', BTF)])
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert no_temp_files(tmp_path)

    with open(path, 'ab') as f:
        f.write(b'x')
    with pytest.raises(ElfError, match='changed since it was read'):
        rewrite_object(str(path), elf, [NewSection('.BTF', BTF)])


def test_rel_addends_are_checked(build, tmp_path):
    path = fresh(build, tmp_path, 'gcc-m32')
    elf = load(path)
    with pytest.raises(ElfError, match='REL relocations'):
        rewrite_object(str(path), elf, [], {'.data': [Reloc(0, 1, 1, 0)]})
    with pytest.raises(ElfError, match='addend 4294967296 does not fit'):
        rewrite_object(str(path), elf, [NewSection('.BTF', BTF)],
                       {'.BTF': [Reloc(0, 1, 1, 1 << 32)]})
    rewrite_object(str(path), elf, [NewSection('.BTF', BTF)], {'.BTF': [Reloc(0, 1, 1, -4)]})
    new = load(path)
    assert new.section_data(new.section_by_name('.BTF'))[:4] == b'\xfc\xff\xff\xff'


def test_only_relocatable_objects_are_rewritten(build, tmp_path):
    main_o = tmp_path / 'main.o'
    run('gcc', '-c', FIXTURES / 'main.c', '-o', main_o)
    prog = tmp_path / 'prog'
    run('gcc', '-o', prog, build('gcc-dwarf5'), main_o)
    with pytest.raises(ElfError, match='not a relocatable object'):
        rewrite_object(str(prog), load(prog), [NewSection('.BTF', BTF)])


def test_section_symbol_index(build):
    for variant in ('gcc-dwarf5', 'clang-dwarf5', 'gcc-m32'):
        path = build(variant)
        elf = load(path)
        section_syms = {ndx for _, _, _, _, typ, _, ndx in readelf_symbols(path)
                        if typ == STT_SECTION}
        assert section_syms
        for sec in elf.sections:
            idx = section_symbol_index(elf, sec.index)
            assert (idx is not None) == (sec.index in section_syms), sec.name
            if idx is not None:
                sym = elf.symbols()[idx]
                assert (sym.type, sym.shndx) == (STT_SECTION, sec.index)


def test_remove_sections(build, tmp_path):
    path = fresh(build, tmp_path, 'gcc-dwarf5')
    original = load(path)
    add_btf(path)
    added = path.read_bytes()
    with pytest.raises(ElfError, match='only sections at the end'):
        remove_sections(str(path), load(path), ['.text'])
    assert path.read_bytes() == added
    assert remove_sections(str(path), load(path), ['.BTF'])
    stripped = load(path)
    assert stripped.section_by_name('.BTF') is None
    assert stripped.section_by_name('.rela.BTF') is None
    assert len(stripped.sections) == len(original.sections)
    assert_old_sections_intact(original, stripped)
    assert not remove_sections(str(path), stripped, ['.BTF'])
    run('ld', '-r', '-o', tmp_path / 'partial.o', path)


def test_replace_in_place_refuses_a_file_changed_since_it_was_read(build, tmp_path):
    """As rewrite_object does: the linked file another writer replaced or
    rewrote is not overwritten with what was read before."""
    from objbtf.elf.errors import FileChanged
    from objbtf.elf.writer import replace_in_place
    path = fresh(build, tmp_path, 'gcc-dwarf5')
    rewrite_object(str(path), ElfFile.open(str(path)), [NewSection('.BTF', BTF)])
    elf = ElfFile.open(str(path))
    with open(path, 'ab') as f:
        f.write(b'x')
    changed = path.read_bytes()
    with pytest.raises(FileChanged, match='changed since it was read'):
        replace_in_place(str(path), elf, '.BTF', b'')
    assert path.read_bytes() == changed


@pytest.mark.parametrize('pid', ['99999999999999999999999', '²³', '0', '-1'])
def test_a_temporary_whose_pid_is_no_pid_is_left_alone(build, tmp_path, pid):
    """Stale-temporary cleanup never fails a write on a name it did not write."""
    from objbtf.elf import writer
    odd = tmp_path / f'.objbtf-x.o.{pid}.0.tmp'
    odd.write_bytes(b'')
    writer._cleaned.discard(str(tmp_path))
    writer.write_atomically(str(tmp_path / 'x.o'), [b'new'])
    assert (tmp_path / 'x.o').read_bytes() == b'new' and odd.exists()


def test_writes_need_no_proc(tmp_path, monkeypatch):
    """Without /proc (a chroot, a minimal container) an atomic write uses a
    named temporary instead of naming an O_TMPFILE file through /proc."""
    from objbtf.elf import writer
    monkeypatch.setattr(writer, 'PROC_FD', str(tmp_path / 'no-proc'))
    monkeypatch.setattr(writer, '_proc_fd', None)
    (tmp_path / 'x.o').write_bytes(b'old')
    writer.write_atomically(str(tmp_path / 'x.o'), [b'new'])
    assert (tmp_path / 'x.o').read_bytes() == b'new'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['x.o']


@pytest.mark.parametrize('fsync', ['1', '0'])
def test_a_durable_write_syncs_the_file_then_its_directory(tmp_path, monkeypatch, fsync):
    """OBJBTF_FSYNC=1: the new file's data before the rename, the directory
    after it; by default neither (a kernel build's objects can be written again)."""
    from objbtf.elf import writer
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, 'fsync', lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)),
                                                 real(fd))[1])
    monkeypatch.setenv('OBJBTF_FSYNC', fsync)
    (tmp_path / 'x.o').write_bytes(b'old')
    writer.write_atomically(str(tmp_path / 'x.o'), [b'new'])
    assert (tmp_path / 'x.o').read_bytes() == b'new'
    assert synced == ([False, True] if fsync == '1' else [])
