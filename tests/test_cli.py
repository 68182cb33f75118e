"""The compiler wrapper, objects without DWARF, and broken objects."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c, need, objbtf, run
from objbtf.dwarf.reader import read_uleb
from objbtf.elf.reader import ElfFile


def sections(obj: Path) -> set[str]:
    with ElfFile.open(str(obj)) as elf:
        return {s.name for s in elf.sections}


@pytest.mark.parametrize('compiler', ['gcc', 'clang'])
def test_cc_wrapper_compiles_and_encodes(tmp_path, compiler):
    need(compiler)
    out = tmp_path / 'k.o'
    r = objbtf('cc', '--', compiler, '-g', '-O2', '-c', '-o', out, C_FIXTURES / 'kinds.c')
    assert r.returncode == 0, r.stderr
    assert {'.BTF', '.rela.BTF'} <= sections(out)


def test_cc_wrapper_failed_compile_leaves_nothing(tmp_path):
    bad = tmp_path / 'bad.c'
    bad.write_text('int f( {\n')
    out = tmp_path / 'bad.o'
    out.write_bytes(b'stale')
    r = objbtf('cc', '--', 'gcc', '-g', '-c', '-o', out, bad, check=False)
    assert r.returncode == 1 and 'error' in r.stderr
    assert not out.exists()


def test_cc_wrapper_passes_exit_status(tmp_path):
    r = objbtf('cc', '--', 'sh', '-c', 'exit 3', check=False)
    assert r.returncode == 3


def chunks(obj: Path):
    from objbtf.btf.chunk import SECTION, split_chunks
    with ElfFile.open(str(obj)) as elf:
        return split_chunks(elf.section_data(elf.section_by_name(SECTION)), elf.byteorder)


def test_object_without_types_gets_a_notice_and_a_named_chunk(tmp_path):
    """Assembly with DWARF (line info, no types) and C without DWARF: no
    .BTF, which would have no types, but a chunk naming the object, so that
    the link knows it went through objbtf."""
    asm = tmp_path / 'a.S'
    asm.write_text('.globl f\nf: ret\n')
    obj = tmp_path / 'a.o'
    run('gcc', '-g', '-c', '-o', obj, asm)
    r = objbtf('encode', obj)
    assert r.returncode == 0 and r.stderr.count('\n') == 1 and str(obj) in r.stderr
    nodebug = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'g0.o', '-g0')
    r = objbtf('encode', '-q', nodebug)
    assert r.returncode == 0 and r.stderr == ''
    assert '.debug_info' in sections(obj) and '.debug_info' not in sections(nodebug)
    for path in (obj, nodebug):
        assert '.BTF' not in sections(path)
        [chunk] = chunks(path)
        assert chunk.name == str(path) and chunk.count == chunk.btf_size == 0 and chunk.usable
    before = obj.read_bytes()
    objbtf('encode', '-q', obj)
    assert obj.read_bytes() == before


def struct_name_form(abbrev: bytes) -> int:
    """Where, in a .debug_abbrev, the first structure type's DW_AT_name
    (0x03) gives its form."""
    pos = 0
    while True:
        code, pos = read_uleb(abbrev, pos)
        assert code, 'no structure type with a name'
        tag, pos = read_uleb(abbrev, pos)
        pos += 1                                    # DW_CHILDREN_*
        while True:
            attr, pos = read_uleb(abbrev, pos)
            form_at = pos
            form, pos = read_uleb(abbrev, pos)
            if attr == form == 0:
                break
            if form == 0x21:                        # DW_FORM_implicit_const's value
                pos = read_uleb(abbrev, pos)[1]
            if tag == 0x13 and attr == 0x03:
                return form_at


def corrupt_variants(good: bytes, tmp_path: Path) -> dict[str, bytes]:
    """Broken objects, each derived from a real one."""
    with ElfFile.open(str(tmp_path / 'good.o')) as elf:
        info = elf.section_by_name('.debug_info')
        abbrev = elf.section_by_name('.debug_abbrev')
        rela = elf.reloc_section_for(info.index)
        symtab = elf.symtab()
    rng = random.Random(7)
    out = {
        'empty': b'',
        'truncated-header': good[:40],
        'truncated-middle': good[:len(good) // 2],
        'random-bytes': bytes(rng.randrange(256) for _ in range(4096)),
    }
    broken = bytearray(good)
    broken[info.offset + 12: info.offset + info.size] = bytes(rng.randrange(256) for _ in range(info.size - 12))
    out['corrupt-debug-info'] = bytes(broken)
    no_abbrev = bytearray(good)
    name_pos = no_abbrev.index(b'.debug_abbrev\0')
    no_abbrev[name_pos:name_pos + 13] = b'.debug_xxxxxx'
    out['missing-debug-abbrev'] = bytes(no_abbrev)
    bad_rel = bytearray(good)
    # r_info of the first relocation: a symbol index far past the table.
    bad_rel[rela.offset + 8: rela.offset + 16] = (0x7fff0000 << 32 | 10).to_bytes(8, 'little')
    out['bad-relocation'] = bytes(bad_rel)
    # A structure's name in a form of another class: DW_FORM_data4 for
    # DW_FORM_strp, the same 4 bytes, so every DIE still decodes.
    not_a_string = bytearray(good)
    form_at = abbrev.offset + struct_name_form(good[abbrev.offset:abbrev.offset + abbrev.size])
    assert not_a_string[form_at] == 0x0e                    # DW_FORM_strp
    not_a_string[form_at] = 0x06
    out['name-not-a-string'] = bytes(not_a_string)
    # An unsupported relocation in a section whose name holds a newline and
    # a byte that is not UTF-8: the error quotes the name, on one line.
    unprintable = bytearray(bad_rel)
    name_pos = unprintable.index(b'.rela.debug_info\0')
    unprintable[name_pos:name_pos + 5] = b'.r\n\xffa'    # '.debug_info' shares the tail
    unprintable[rela.offset + 8:rela.offset + 16] = (1 << 32 | 0xfe).to_bytes(8, 'little')
    out['unprintable-name'] = bytes(unprintable)
    assert symtab is not None and abbrev is not None
    return out


def test_malformed_objects_fail_cleanly(tmp_path):
    good = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'good.o').read_bytes()
    for name, data in corrupt_variants(good, tmp_path).items():
        path = tmp_path / f'{name}.o'
        path.write_bytes(data)
        r = objbtf('encode', path, check=False)
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and 'Traceback' not in r.stderr, (name, r.stderr)
        assert path.read_bytes() == data, name
        assert not [p for p in os.listdir(tmp_path) if p.startswith('.objbtf')], name
        if name == 'name-not-a-string':
            assert 'DW_AT_name' in lines[0] and 'form 0x6' in lines[0], lines[0]


@pytest.mark.parametrize('debug', ['-g', '-gbtf'])
def test_a_symbol_table_no_whole_entry_fits_fails_cleanly(tmp_path, debug):
    """A symbol table whose size holds no whole entry (1 byte), from DWARF
    and from GCC's BTF, which reads the symbols first."""
    need('gcc')
    obj = tmp_path / 'kinds.o'
    run('gcc', '-O2', debug, '-c', '-o', obj, C_FIXTURES / 'kinds.c')
    with ElfFile.open(str(obj)) as elf:
        symtab = elf.symtab()
        assert symtab is not None and elf.elf_class == 64
        size_at = elf.e_shoff + symtab.index * 64 + 32     # Elf64_Shdr's sh_size
    data = bytearray(obj.read_bytes())
    data[size_at:size_at + 8] = (1).to_bytes(8, 'little')
    obj.write_bytes(data)
    r = objbtf('encode', obj, check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr
    assert str(obj) in lines[0] and 'symbol table .symtab' in lines[0], lines[0]
    assert obj.read_bytes() == data


def test_help_teaches():
    for cmd in ([], ['encode'], ['cc'], ['link']):
        r = objbtf(*cmd, '--help')
        assert r.returncode == 0 and 'Usage' in r.stdout
    assert 'objbtf cc -- gcc' in objbtf('--help').stdout
    link = objbtf('link', '--help').stdout
    for option in ('--objects LIST', '--allow-missing', '--quiet', 'vmlinux.a', '.mod'):
        assert option in link


def test_link_option_mistakes_are_usage_errors(tmp_path):
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    r = objbtf('link', '--allow-missing', obj, check=False)
    assert r.returncode == 2 and '--allow-missing needs --objects' in r.stderr


def test_link_missing_objects_list_is_bad_input(tmp_path):
    """A list that does not exist is an input error (1), not a usage error (2)."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    r = objbtf('link', '--objects', tmp_path / 'nothing.a', obj, check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f'Error: {tmp_path / "nothing.a"}: No such file or directory']
