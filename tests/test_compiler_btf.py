"""The compiler-BTF loader on real gcc objects: GCC's own ``.BTF`` (``-gbtf``,
with and without ``-g``) encoded by objbtf gives what the DWARF path gives
for the same source, checked by objbtf's validator, bpftool and the running
kernel, and placed by real relocations after a real ``ld``."""
from __future__ import annotations

from pathlib import Path

import pytest

from btf_shapes import (kind_counts, lost_enumerators, named_types, same_types,
                        without_wide_enumerators)
from conftest import C_FIXTURES, FIXTURES, need, objbtf, run
from objbtf.btf import Btf, Kind, parse_btf
from objbtf.btf.function_rules import FACT_UNCERTAIN_LOC, FACT_WEAK
from objbtf.btf.kinds import INT_CHAR
from objbtf.btf.writer import type_offsets
from objbtf.elf.reader import ElfFile
from test_relocations import assert_linked_offsets, datasec_fields, rela_btf, symbol_sections

SOURCES = ('kinds', 'scopes', 'counter_a', 'counter_b', 'aliases', 'asm_defined')
#: The DWARF-less build compiles with -gbtf alone; -g -gbtf also has DWARF,
#: which objbtf leaves unread.
GBTF_FLAGS = {'gbtf': ('-gbtf',), 'g-gbtf': ('-g', '-gbtf')}
FEATURES = ('default', 'default,global_var', 'default,-float,-var')


def compile_with(src: str, out: Path, *flags: str) -> Path:
    run(need('gcc'), '-O2', '-c', *flags, '-o', out, C_FIXTURES / f'{src}.c')
    return out


def section(obj: Path, name: str = '.BTF') -> bytes | None:
    with ElfFile.open(str(obj)) as elf:
        sec = elf.section_by_name(name)
        return None if sec is None else elf.section_data(sec)


def has_dwarf(obj: Path) -> bool:
    return section(obj, '.debug_info') is not None


def pair(tmp_path: Path, src: str, flags: str, features: str = 'default') -> tuple[Btf, Btf]:
    """(DWARF path's BTF from a -g compile, compiler path's from ``flags``)."""
    dwarf = compile_with(src, tmp_path / f'{src}.g.o', '-g')
    gbtf = compile_with(src, tmp_path / f'{src}.{flags}.o', *GBTF_FLAGS[flags])
    assert section(dwarf) is None and section(gbtf) is not None
    assert has_dwarf(gbtf) == ('-g' in GBTF_FLAGS[flags])
    for obj in (dwarf, gbtf):
        r = objbtf('encode', '--btf-features', features, obj, check=False)
        assert r.returncode == 0 and not r.stderr, r.stderr
    return parse_btf(section(dwarf)), parse_btf(section(gbtf))


@pytest.mark.parametrize('features', FEATURES)
@pytest.mark.parametrize('flags', sorted(GBTF_FLAGS))
@pytest.mark.parametrize('src', SOURCES)
def test_same_types_as_the_dwarf_path(tmp_path, src, flags, features):
    """Every type, variable and function the DWARF path encodes, and nothing
    else: the same counts per kind, the same named types, the same shapes
    (types spelled out through their references, ids aside), with one
    derived difference: GCC 12's BTF holds no enumerator outside the 32-bit
    signed range, nor any enum's signedness."""
    dwarf, ours = pair(tmp_path, src, flags, features)
    expected = without_wide_enumerators(dwarf)
    assert kind_counts(ours) == kind_counts(dwarf)
    assert named_types(ours) == named_types(expected)
    assert same_types(ours, expected) == []


def test_fixture_loses_the_enumerators_derived(tmp_path):
    """The enum difference is real on the fixture and exactly the derived one."""
    dwarf, ours = pair(tmp_path, 'kinds', 'gbtf')
    assert lost_enumerators(dwarf) == {'uns': ['U_B'], 'wide': ['W_A']}
    enums = {t.name: [e.name for e in t.items] for _, t in ours.own()
             if t.kind in (Kind.ENUM, Kind.ENUM64)}
    assert enums['uns'] == ['U_A'] and enums['wide'] == ['W_B']


def test_without_enum64(tmp_path):
    """-enum64: enums of 8 bytes are ENUMs of size 8, as on the DWARF path,
    with the values GCC kept."""
    dwarf, ours = pair(tmp_path, 'kinds', 'gbtf', 'default,-enum64')
    assert kind_counts(ours) == kind_counts(dwarf) and Kind.ENUM64.name not in kind_counts(ours)
    wide = [t for _, t in ours.own() if t.name == 'wide']
    assert [(t.kind, t.size, t.kflag, t.items) for t in wide] == [(Kind.ENUM, 8, 1, (('W_B', -1),))]


@pytest.mark.parametrize('flags', sorted(GBTF_FLAGS))
def test_checked_three_ways(tmp_path, flags, kernel_loader):
    """GCC's raw .BTF is rejected by the kernel (INT 'char' SIGNED|CHAR,
    zero DATASEC sizes); objbtf's encoding of it passes objbtf check,
    bpftool and BPF_BTF_LOAD."""
    obj = compile_with('kinds', tmp_path / 'k.o', *GBTF_FLAGS[flags])
    raw = section(obj)
    assert any(t.kind is Kind.INT and t.encoding & INT_CHAR for _, t in parse_btf(raw).own())
    assert not kernel_loader(raw).ok
    objbtf('encode', obj)
    assert objbtf('check', obj).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', obj).stdout
    assert "STRUCT 'bits'" in dump and "INT 'char' size=1 bits_offset=0 nr_bits=8 encoding=SIGNED" in dump
    verdict = kernel_loader(section(obj))
    assert verdict.ok, verdict.log


def test_functions_the_object_defines(tmp_path):
    """GCC writes a FUNC for every function the unit declares or takes the
    address of; objbtf keeps those with a function symbol and named
    parameters, the DWARF path's choice."""
    obj = compile_with('kinds', tmp_path / 'k.o', '-gbtf')
    raw_funcs = {t.name for _, t in parse_btf(section(obj)).own() if t.kind is Kind.FUNC}
    objbtf('encode', obj)
    funcs = sorted(t.name for _, t in parse_btf(section(obj)).own() if t.kind is Kind.FUNC)
    assert funcs == ['restrict_fn', 'takes_unnamed', 'uses_static', 'variadic']
    assert {'static_helper', ''} <= raw_funcs - set(funcs)


def test_variables_by_their_symbols(tmp_path):
    """Function-scope statics (GCC's symbol NAME.N), extern, skipped and empty
    variables get no VAR; each VAR kept is relocated against its own symbol
    in its own section."""
    obj = compile_with('scopes', tmp_path / 's.o', '-gbtf')
    raw = parse_btf(section(obj))
    assert {'ext_counter', 'ext_plain', '__UNIQUE_ID_skipped', 'nothing'} <= {
        t.name for _, t in raw.own() if t.kind is Kind.VAR}
    objbtf('encode', '--btf-features', 'default,global_var', obj)
    fields = datasec_fields(section(obj))
    assert sorted(v for _, _, v in fields) == sorted(
        ['counter', 'enum_ptr', 'file_only', 'grid', 'rows', 'union_ptr'])
    sections = symbol_sections(obj)
    assert all(sections[var] == sec for _, sec, var in fields)
    assert sorted((off, var) for off, _, var in fields) == sorted(
        (off, sym) for off, _, sym in rela_btf(obj))
    btf = parse_btf(section(obj))
    enum = [t for _, t in btf.own() if t.name == 'decl_only']
    assert [(t.kind, t.size, t.vlen) for t in enum] == [(Kind.ENUM, 4, 0)]


def test_linker_places_every_variable(tmp_path):
    """After a real ld, every DATASEC entry holds its variable's address,
    same-name statics of two objects and percpu subsections included."""
    objs = [compile_with(name, tmp_path / f'{name}.o', '-gbtf')
            for name in ('counter_a', 'counter_b')]
    for obj in objs:
        objbtf('encode', obj)
    assert_linked_offsets(tmp_path, objs)


def test_deterministic_and_encoded_once(tmp_path):
    """GCC 12 writes FUNCs and VARs in an order that changes between
    compiles; objbtf's output does not, and keeps none of GCC's old bytes.
    Once encoded, the object's .BTF is objbtf's own and no source of types:
    encoding it again without DWARF leaves it without types, as an object
    whose DWARF was stripped (docs/design.md: re-encoding)."""
    outputs = set()
    for _ in range(3):
        obj = compile_with('kinds', tmp_path / 'k.o', '-gbtf')
        gcc_types = section(obj)[24:][:1024]
        objbtf('encode', 'k.o', cwd=tmp_path)
        outputs.add(obj.read_bytes())
        assert gcc_types not in obj.read_bytes()
    assert len(outputs) == 1
    again = objbtf('encode', 'k.o', cwd=tmp_path)
    assert 'no types to encode' in again.stderr and not section(obj)


def test_a_unit_none_of_whose_compiler_btf_stays(tmp_path):
    """GCC 12 writes a .BTF that bpftool refuses for a unit that only
    declares a function, and none of it stays.  The encode left that .BTF
    beside its typeless chunk, and a link of the object with another failed
    on its bytes (as on a damaged GCC .BTF: the fuzzer, encode case 8051 of
    seed 14); now the .BTF is emptied, and the link gives the other's BTF."""
    declares = tmp_path / 'declares.c'
    declares.write_text('void f(void);\n')
    obj = tmp_path / 'declares.o'
    run(need('gcc'), '-O2', '-c', '-gbtf', '-o', obj, declares)
    assert section(obj)
    r = objbtf('encode', obj)
    assert 'no types to encode' in r.stderr and section(obj) == b''
    kinds = compile_with('kinds', tmp_path / 'kinds.o', '-gbtf')
    objbtf('encode', kinds)
    alone, both = tmp_path / 'alone.o', tmp_path / 'both.o'
    run('ld', '-r', '-o', alone, kinds)
    run('ld', '-r', '-o', both, obj, kinds)
    for linked in (alone, both):
        objbtf('link', linked)
    assert section(both) == section(alone) != b''


def test_with_dwarf_the_compiler_btf_first_then_dwarf(tmp_path):
    """-g -gbtf: the first encode reads GCC's BTF (the same .BTF as -gbtf
    alone); once encoded, the object is encoded again from its DWARF, as
    an object compiled with -g alone is, byte for byte."""
    both = compile_with('kinds', tmp_path / 'both.o', '-g', '-gbtf')
    alone = compile_with('kinds', tmp_path / 'alone.o', '-gbtf')
    plain = compile_with('kinds', tmp_path / 'plain.o', '-g')
    for obj in (both, alone, plain):
        objbtf('encode', obj)
    assert section(both) == section(alone)
    objbtf('encode', both)
    assert section(both) == section(plain)


@pytest.mark.parametrize('word', [8, 7, 0])
def test_declared_enums_however_gcc_numbered_them(tmp_path, word):
    """GCC 12 writes a declared enum as a FWD of struct, its CTF kind (8) in
    the header word, renumbered as a type id would be: 7 and 0 were seen
    (kernel/topology.o of a small x86_64 config; that object's structs had
    0).  An enum a function returns becomes pahole's ENUM without values
    whatever the word (the kernel refuses a FWD there); one only behind
    pointers when the word is above a struct's 6, and below that it is a
    struct's FWD to the loader too.  Struct and union FWDs stay."""
    obj = compile_with('declared_enums', tmp_path / 'e.o', '-gbtf')
    raw = parse_btf(section(obj))
    fwds = {t.name: i for i, t in raw.own() if t.kind is Kind.FWD}
    assert (raw[fwds['by_value']].type, raw[fwds['by_pointer']].type) == (8, 8)
    with ElfFile.open(str(obj)) as elf:
        sec = elf.section_by_name('.BTF')
        start = sec.offset + int.from_bytes(section(obj)[4:8], 'little')    # hdr_len
    data = bytearray(obj.read_bytes())
    offsets = type_offsets(raw)
    for name in ('by_value', 'by_pointer'):
        at = start + offsets[fwds[name] - 1] + 8               # the header word
        data[at:at + 4] = word.to_bytes(4, 'little')
    obj.write_bytes(bytes(data))
    objbtf('encode', obj)
    kinds = {t.name: (t.kind, t.vlen, t.kflag) for _, t in parse_btf(section(obj)).own()}
    assert kinds['by_value'] == (Kind.ENUM, 0, 0)
    assert kinds['by_pointer'] == ((Kind.ENUM, 0, 0) if word > 6 else (Kind.FWD, 0, 0))
    assert kinds['opaque'] == (Kind.FWD, 0, 0) and kinds['hidden'] == (Kind.FWD, 0, 1)


def test_broken_compiler_btf_is_one_line_error(tmp_path):
    obj = compile_with('kinds', tmp_path / 'k.o', '-gbtf')
    with ElfFile.open(str(obj)) as elf:
        sec = elf.section_by_name('.BTF')
        offset = sec.offset
    data = bytearray(obj.read_bytes())
    data[offset:offset + 2] = b'\0\0'           # the magic
    obj.write_bytes(bytes(data))
    r = objbtf('encode', obj, check=False)
    assert r.returncode == 1
    assert r.stderr.count('\n') == 1 and str(obj) in r.stderr and 'magic' in r.stderr
    assert obj.read_bytes() == bytes(data)


def test_uncertain_location_from_the_types(tmp_path):
    """pahole's uncertain_parm_loc needs no location, only types: a packed
    struct passed on the stack, past the six register parameters
    (``many`` of tests/fixtures/functions/clones_a.c).  The -gbtf object's
    chunk says it as the -g one's does, so the link drops ``many`` from
    both; the facts only DWARF gives (an optimized clone's, a register's)
    stay the -g object's alone."""
    from test_functions import chunk_facts
    source = FIXTURES / 'functions' / 'clones_a.c'
    objs = {}
    for mode in ('g', 'gbtf'):
        objs[mode] = tmp_path / f'clones_a.{mode}.o'
        run(need('gcc'), '-O2', '-c', f'-{mode}', '-o', objs[mode], source)
        objbtf('encode', objs[mode])
    dwarf, ours = chunk_facts(objs['g']), chunk_facts(objs['gbtf'])
    assert dwarf['many'] == ours['many'] == FACT_UNCERTAIN_LOC
    assert ours == {n: f & (FACT_UNCERTAIN_LOC | FACT_WEAK) for n, f in dwarf.items()
                    if f & (FACT_UNCERTAIN_LOC | FACT_WEAK)}


# --- assembly, which the DWARF-less build gives no -g -------------------------

ASM_FIXTURES = FIXTURES / 'asm'


def functions(btf: Btf) -> dict[str, list[str]]:
    """Each FUNC's name and its prototypes, as ``objbtf diff`` spells them."""
    from objbtf.inspect.diff import function_decls
    return dict(function_decls(btf))


def test_assembly_without_dwarf_has_the_functions_of_gas_dwarf(tmp_path):
    """An assembly object without DWARF, as the DWARF-less build assembles
    it, gets what the DWARF path gives the same file assembled with -g from
    gas's DWARF: a FUNC without parameters for each function symbol defined
    with a size (the local one, the weak one with its fact, the alias, the
    one in another section), none for a label without type or a function
    without size, nor for the padding objtool names after gas ran (written
    here, gas's DWARF has it too); encoded again, the same bytes.  A C object without debug
    information still has no types, nor one whose debug information strip
    took, FILE symbols with it (its .comment names the compiler)."""
    from test_functions import chunk_facts
    source = ASM_FIXTURES / 'functions.S'
    with_g, bare = tmp_path / 'with_g.o', tmp_path / 'bare.o'
    run(need('gcc'), '-g', '-c', '-o', with_g, source)
    run('gcc', '-c', '-o', bare, source)
    assert has_dwarf(with_g) and not has_dwarf(bare)
    objbtf('encode', with_g, bare)
    dwarf, ours = parse_btf(section(with_g)), parse_btf(section(bare))
    padding = {'__pfx_padded': ['void __pfx_padded(void)']}
    assert functions(ours) | padding == functions(dwarf) == padding | {
        name: [f'void {name}(void)']
        for name in ('copy_words', 'local_helper', 'weak_entry', 'copy_alias', 'padded',
                     '__pfx_not_padding', 'entry_other')}
    assert kind_counts(ours) == {'FUNC_PROTO': 1, 'FUNC': 7}
    assert chunk_facts(bare) == chunk_facts(with_g) == {'weak_entry': FACT_WEAK}
    before = bare.read_bytes()
    objbtf('encode', bare)
    assert bare.read_bytes() == before
    nodebug = compile_with('kinds', tmp_path / 'g0.o', '-g0')
    stripped = compile_with('kinds', tmp_path / 'stripped.o', '-g')
    run(need('strip'), '--strip-debug', stripped)
    for obj in (nodebug, stripped):
        r = objbtf('encode', obj)
        assert 'no types to encode' in r.stderr and section(obj) is None


def test_a_weak_c_function_with_an_assembly_definition_links_alike(tmp_path):
    """A weak C function that an assembly file defines too (the kernel's
    ``__iowrite32_copy``): the DWARF path has two prototypes for its name,
    the C one and gas's empty one, and the link drops its FUNC; linked from
    GCC's BTF and the bare assembly object, the same BTF."""
    need('ld')
    linked = {}
    for mode, c_flags, as_flags in (('dwarf', ('-g',), ('-g',)), ('gbtf', ('-gbtf',), ())):
        c_obj, s_obj = tmp_path / f'copy_words.{mode}.o', tmp_path / f'functions.{mode}.o'
        run(need('gcc'), '-O2', '-c', *c_flags, '-o', c_obj, ASM_FIXTURES / 'copy_words.c')
        run('gcc', '-c', *as_flags, '-o', s_obj, ASM_FIXTURES / 'functions.S')
        objbtf('encode', c_obj, s_obj)
        out = tmp_path / f'{mode}.o'
        run('ld', '-r', '-o', out, c_obj, s_obj)
        objbtf('link', out)
        linked[mode] = parse_btf(section(out))
    names = set(functions(linked['dwarf']))
    assert {'first_word', 'weak_entry', 'entry_other'} <= names and 'copy_words' not in names
    assert functions(linked['gbtf']) == {n: p for n, p in functions(linked['dwarf']).items()
                                         if n != '__pfx_padded'}
    assert named_types(linked['gbtf']) == named_types(linked['dwarf'])


# --- kernel objects -----------------------------------------------------------

def _kernel_object(build: Path, obj: Path, work: Path, flags: str) -> list[str]:
    """Compile ``obj`` again with its saved Kbuild command and ``flags`` (for
    -gbtf alone, its -g left out), encode it from GCC's BTF, and return how
    it differs from the DWARF path's encoding of the reference object beyond
    what gcc_btf_facts derives from that object's DWARF."""
    from saved_commands import compile_command
    from gcc_btf_facts import dwarf_facts, unexplained
    from objbtf.encode.object_file import encode_path
    from objbtf.features import Features
    cmd = compile_command(build, obj, work / 'gbtf.o')
    if flags == 'gbtf':
        cmd = [a for a in cmd if a != '-g' and not a.startswith('-gdwarf')]
    run(*cmd, '-gbtf', cwd=build)
    (work / 'dwarf.o').write_bytes(obj.read_bytes())
    ours = encode_path(str(work / 'gbtf.o'), Features())
    dwarf = encode_path(str(work / 'dwarf.o'), Features())
    if dwarf is None:
        return [] if ours is None else [f'{obj}: types from GCC BTF, none from DWARF']
    mine = ours.btf if ours is not None else Btf()    # assembly: FUNCs from gas's DWARF only
    problems = unexplained(mine, dwarf.btf, dwarf_facts(str(obj)))
    return [f'{obj.relative_to(build)}: {p}' for p in problems]


@pytest.mark.kernel
@pytest.mark.parametrize('flags', sorted(GBTF_FLAGS))
def test_kernel_objects(kernel_build, tmp_path, flags):
    """Every 40th C object of the reference kernel, compiled again with its
    saved Kbuild command line and -gbtf, encoded from GCC's BTF: valid BTF,
    and what the DWARF path gives for the same object but for the
    differences derived from its DWARF."""
    from saved_commands import compile_command
    from kernel_tree import objects
    from objbtf.btf.validate import validate_bytes
    sample = [o for o in objects(kernel_build)[::40]
              if compile_command(kernel_build, o, tmp_path / 'x.o') is not None]
    assert len(sample) > 15
    problems = []
    for obj in sample:
        problems += _kernel_object(kernel_build, obj, tmp_path, flags)
        raw = section(tmp_path / 'gbtf.o')
        if raw is not None:
            errors = validate_bytes(raw)
            problems += [f'{obj}: {e}' for e in errors[:1]]
    assert problems == []
