"""The per-object encoder on real gcc and clang objects, checked three ways:
objbtf's own validator, bpftool, and the running kernel; and against pahole."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import C_FIXTURES, compile_c, need, objbtf, run
from objbtf.btf import Kind, parse_btf
from objbtf.btf.kinds import INT_BOOL, INT_SIGNED
from objbtf.btf_file import load_btf_file, read_btf_bytes
from objbtf.elf.reader import ElfFile
from pahole_compare import differences, pahole_btf

VARIANTS = {
    'gcc-dwarf5': ('gcc', '-gdwarf-5'),
    'gcc-dwarf4': ('gcc', '-gdwarf-4'),
    'gcc-gz': ('gcc', '-gz'),
    'clang-dwarf4': ('clang', '-gdwarf-4'),
    'clang-dwarf5': ('clang', '-gdwarf-5'),
    'clang-gz': ('clang', '-gz'),
}


def section_btf(obj: Path):
    with ElfFile.open(str(obj)) as elf:
        sec = elf.section_by_name('.BTF')
        assert sec is not None, f'{obj} has no .BTF'
        return parse_btf(elf.section_data(sec))


def encoded(tmp_path: Path, variant: str, name: str = 'kinds') -> Path:
    compiler, flag = VARIANTS[variant]
    obj = compile_c(compiler, C_FIXTURES / f'{name}.c', tmp_path / f'{name}.o', flag)
    objbtf('encode', obj)
    return obj


def by_name(btf, kind: Kind, name: str):
    hits = [t for _, t in btf.own() if t.kind is kind and t.name == name]
    assert hits, f'no {kind.name} {name!r} in the BTF'
    return hits[0]


@pytest.mark.parametrize('variant', sorted(VARIANTS))
def test_three_way_check(tmp_path, variant, kernel_loader):
    obj = encoded(tmp_path, variant)
    assert objbtf('check', obj).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', obj).stdout
    assert "STRUCT 'bits'" in dump
    with ElfFile.open(str(obj)) as elf:
        raw = elf.section_data(elf.section_by_name('.BTF'))
    verdict = kernel_loader(raw)
    assert verdict.ok, verdict.log


@pytest.mark.parametrize('variant', sorted(VARIANTS))
def test_matches_pahole(tmp_path, variant):
    need('pahole')
    obj = encoded(tmp_path, variant)
    assert differences(section_btf(obj), pahole_btf(obj), obj) == []


def test_every_kind_and_rule(tmp_path):
    btf = section_btf(encoded(tmp_path, 'gcc-dwarf5'))
    bits = by_name(btf, Kind.STRUCT, 'bits')
    assert bits.kflag == 1
    assert [(m.name, m.bit_offset, m.bitfield_size) for m in bits.items] == [
        ('a', 0, 3), ('b', 3, 5), ('c', 8, 40), ('d', 48, 0), ('e', 56, 1)]
    packed = by_name(btf, Kind.STRUCT, 'packed')
    assert packed.size == 7 and [m.bit_offset for m in packed.items] == [0, 8, 40]
    u = by_name(btf, Kind.UNION, 'u')
    assert all(m.bit_offset == 0 for m in u.items) and u.items[2].name == ''
    assert btf[u.items[2].type].kind is Kind.STRUCT and btf[u.items[2].type].name == ''
    flex = by_name(btf, Kind.STRUCT, 'flex')
    assert btf[flex.items[1].type].kind is Kind.ARRAY and btf[flex.items[1].type].nelems == 0
    zero = by_name(btf, Kind.STRUCT, 'zero_len')
    assert btf[zero.items[1].type].nelems == 0
    matrix = by_name(btf, Kind.VAR, 'percpu_page')
    assert btf[matrix.type].nelems == 64
    assert by_name(btf, Kind.FWD, 'fwd_only').kflag == 0
    assert by_name(btf, Kind.FWD, 'fwd_union').kflag == 1
    small = by_name(btf, Kind.ENUM, 'small')
    assert small.kflag == 1 and [v.value for v in small.items] == [-3, 7]
    uns = by_name(btf, Kind.ENUM, 'uns')
    assert uns.kflag == 0 and uns.items[1].value == 0xffffffff
    wide = by_name(btf, Kind.ENUM64, 'wide')
    assert wide.size == 8 and wide.kflag == 1 and wide.items[1].value == -1
    uwide = by_name(btf, Kind.ENUM64, 'uwide')
    assert uwide.kflag == 0 and uwide.items[0].value == 2**64 - 1
    assert by_name(btf, Kind.INT, '__int128').size == 16
    assert by_name(btf, Kind.INT, '__int128').encoding == INT_SIGNED
    assert by_name(btf, Kind.INT, '__int128 unsigned').encoding == 0
    assert by_name(btf, Kind.INT, '_Bool').encoding == INT_BOOL
    assert by_name(btf, Kind.INT, 'char').encoding == INT_SIGNED
    assert by_name(btf, Kind.INT, 'unsigned char').encoding == 0
    assert {by_name(btf, Kind.FLOAT, n).size for n in ('float', 'double', 'long double')} == {4, 8, 16}
    for kind in (Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.PTR, Kind.TYPEDEF):
        assert any(t.kind is kind for _, t in btf.own()), kind
    variadic = btf[by_name(btf, Kind.FUNC, 'variadic').type]
    assert variadic.items[-1] == ('', 0) and variadic.items[0].name == 'n'
    # A flattened multi-dimensional array: int matrix[3][4][5] -> 60 ints.
    arrays = [t for _, t in btf.own() if t.kind is Kind.ARRAY and t.nelems == 60]
    assert arrays and btf[arrays[0].index_type].name == 'int'


def test_multi_dimensional_array_is_flattened(tmp_path):
    src = tmp_path / 'm.c'
    src.write_text('int matrix[3][4][5];\nint (*use(void))[3][4][5] { return &matrix; }\n')
    obj = compile_c('gcc', src, tmp_path / 'm.o')
    objbtf('encode', obj)
    btf = section_btf(obj)
    assert [t.nelems for _, t in btf.own() if t.kind is Kind.ARRAY] == [60]


def test_percpu_variables_in_every_subsection(tmp_path):
    btf = section_btf(encoded(tmp_path, 'gcc-dwarf5'))
    secs = {t.name: [btf[v.type].name for v in t.items] for _, t in btf.own() if t.kind is Kind.DATASEC}
    assert secs == {
        '.data..percpu': ['percpu_counter'],
        '.data..percpu..first': ['percpu_first'],
        '.data..percpu..page_aligned': ['percpu_page'],
        '.data..percpu..read_mostly': ['percpu_bits'],
        '.data..percpu..shared_aligned': ['percpu_static'],
    }
    assert by_name(btf, Kind.VAR, 'percpu_static').linkage == 0
    assert by_name(btf, Kind.VAR, 'percpu_counter').linkage == 1


def test_global_var_feature_encodes_every_variable(tmp_path):
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    objbtf('encode', '--btf-features', 'default,global_var', obj)
    btf = section_btf(obj)
    names = {t.name for _, t in btf.own() if t.kind is Kind.DATASEC}
    assert {'.bss', '.data..percpu'} <= names
    assert by_name(btf, Kind.VAR, 'matrix')


def test_feature_switches(tmp_path):
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    objbtf('encode', '--btf-features', 'default,-float,-var,-enum64', obj)
    btf = section_btf(obj)
    kinds = {t.kind for _, t in btf.own()}
    assert Kind.FLOAT not in kinds and Kind.VAR not in kinds and Kind.ENUM64 not in kinds
    assert by_name(btf, Kind.ENUM, 'wide').size == 8
    bad = objbtf('encode', '--btf-features', 'nonsense', obj, check=False)
    assert bad.returncode == 2 and 'nonsense' in bad.stderr


def test_clang_type_and_decl_tags(tmp_path, kernel_loader):
    obj = encoded(tmp_path, 'clang-dwarf5', 'tags')
    btf = section_btf(obj)
    tags = [t for _, t in btf.own() if t.kind is Kind.TYPE_TAG]
    assert sorted(t.name for t in tags) == ['tag1', 'tag2']
    tagged = by_name(btf, Kind.STRUCT, 'tagged')
    ptr = btf[tagged.items[0].type]
    assert ptr.kind is Kind.PTR
    chain = [btf[ptr.type]]
    chain.append(btf[chain[0].type])
    assert [t.name for t in chain] == ['tag2', 'tag1'] and btf[chain[1].type].name == 'int'
    decl = {(t.name, btf[t.type].kind.name, btf[t.type].name, t.component_idx)
            for _, t in btf.own() if t.kind is Kind.DECL_TAG}
    assert decl == {('struct_tag', 'STRUCT', 'tagged', -1), ('member_tag', 'STRUCT', 'tagged', 1),
                    ('typedef_tag', 'TYPEDEF', 'tagged_t', -1), ('var_tag', 'VAR', 'tagged_var', -1),
                    ('fn_tag', 'FUNC', 'tagged_fn', -1), ('param_tag', 'FUNC', 'tagged_fn', 0)}
    assert objbtf('check', obj).returncode == 0
    with ElfFile.open(str(obj)) as elf:
        verdict = kernel_loader(elf.section_data(elf.section_by_name('.BTF')))
    assert verdict.ok, verdict.log
    assert differences(btf, pahole_btf(obj), obj) == []


def test_functions_chosen_as_pahole(tmp_path):
    btf = section_btf(encoded(tmp_path, 'gcc-dwarf5'))
    funcs = sorted(t.name for _, t in btf.own() if t.kind is Kind.FUNC)
    # static_helper is inlined into uses_static at -O2: no symbol, no FUNC.
    assert funcs == ['restrict_fn', 'takes_unnamed', 'uses_static', 'variadic']
    assert all(t.linkage == 0 for _, t in btf.own() if t.kind is Kind.FUNC)


@pytest.mark.parametrize('debug', ['-g', '-gbtf'])
def test_a_32_bit_object(tmp_path, debug):
    """i386 (gcc -m32), from its DWARF and from GCC's BTF: pointers of 4
    bytes (a struct ending in one 4 bytes in, a double at a 4-byte
    boundary), which objbtf check takes from the ELF class, as a 32-bit
    kernel would; REL relocations (R_386_32, the addend in the field) on
    each percpu variable's offset, which read as linked alone give each at
    its symbol; pahole's types from the same DWARF."""
    need('gcc')
    obj = tmp_path / 'ptr32.o'
    run('gcc', '-m32', '-O2', debug, '-c', '-o', obj, C_FIXTURES / 'ptr32.c')
    objbtf('encode', obj)
    assert objbtf('check', obj).returncode == 0
    run(need('bpftool'), 'btf', 'dump', 'file', obj)
    btf = load_btf_file(str(obj))
    assert by_name(btf, Kind.STRUCT, 'list_head').size == 8
    [ds] = [t for _, t in btf.own() if t.kind is Kind.DATASEC]
    with ElfFile.open(str(obj)) as elf:
        assert elf.elf_class == 32
        symbols = {s.name: s.value for s in elf.symbols()}
        rel = elf.section_by_name('.rel.BTF')
        assert rel is not None and elf.section_by_name('.rela.BTF') is None
        relocs = elf.relocations(rel)
    assert {(btf[v.type].name, v.offset) for v in ds.items} == {
        (name, symbols[name]) for name in ('percpu_list', 'percpu_sample')}
    assert sorted(r[2] for r in relocs) == [1, 1]          # R_386_32
    if debug == '-g':
        need('pahole')
        assert differences(section_btf(obj), pahole_btf(obj), obj) == []


def test_an_emptied_i386_object_reads_without_its_symbols(tmp_path):
    """An i386 object encoded, then stripped of its DWARF and encoded again,
    keeps an empty .BTF and .rel.BTF: reading it applies no relocation, so
    it reads no symbol, not even from a damaged table (one name's offset
    past the string table)."""
    need('gcc')
    obj = tmp_path / 'ptr32.o'
    run('gcc', '-m32', '-O2', '-g', '-c', '-o', obj, C_FIXTURES / 'ptr32.c')
    objbtf('encode', obj)
    run(need('objcopy'), '--strip-debug', obj)
    objbtf('encode', '-q', obj)
    with ElfFile.open(str(obj)) as elf:
        assert elf.section_by_name('.BTF').size == 0 == elf.section_by_name('.rel.BTF').size
        symtab = elf.symtab()
        assert symtab is not None
    data = bytearray(obj.read_bytes())
    data[symtab.offset + 16:symtab.offset + 20] = (1 << 30).to_bytes(4, 'little')  # st_name of 1
    obj.write_bytes(data)
    assert read_btf_bytes(str(obj)) == b''


def test_deterministic_and_idempotent(tmp_path):
    """The same object under the same name (its path as given, which the
    chunk records) gives the same bytes, once or twice encoded."""
    obj = compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'k.o')
    (tmp_path / 'again').mkdir()
    copy = tmp_path / 'again' / 'k.o'
    copy.write_bytes(obj.read_bytes())
    objbtf('encode', 'k.o', cwd=tmp_path)
    objbtf('encode', 'k.o', cwd=copy.parent)
    first = obj.read_bytes()
    assert first == copy.read_bytes()
    objbtf('encode', 'k.o', cwd=tmp_path)
    assert obj.read_bytes() == first


def test_encoding_leaves_the_cyclic_collector_nothing_to_walk(kernel_build, tmp_path):
    """An object's types form no cycles: reference counting frees them, and
    the collector, paused while they are alive, never walks them.  (Resumed
    with them alive, it walked some 20,000 objects on kernel/fork.o, about
    0.8 ms per object of a build.)  Any walk of them would visit at
    least one object per type."""
    import gc
    import shutil
    from objbtf.cli.commands import run_encode
    from objbtf.features import Features
    obj = shutil.copyfile(kernel_build / 'kernel' / 'fork.o', tmp_path / 'fork.o')
    warm = shutil.copyfile(obj, tmp_path / 'warm.o')
    assert run_encode([str(warm)], Features(), quiet=True) == 0     # the imports
    walked: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == 'start':
            walked.append(sum(len(gc.get_objects(g)) for g in range(info['generation'] + 1)))

    gc.collect()
    gc.callbacks.append(count)
    try:
        assert run_encode([str(obj)], Features(), quiet=True) == 0
    finally:
        gc.callbacks.remove(count)
    types = len(section_btf(obj))
    assert types > 1000 and max(walked, default=0) < types, (walked, types)
