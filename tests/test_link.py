"""objbtf link on small inputs built to stress it: FWD resolution, a struct
name with two definitions, cycles, enums; against libbpf's btf__dedup."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from btf_shapes import kind_counts
from conftest import C_FIXTURES, FIXTURES, encoded_c, need, objbtf, run
from libbpf_oracle import isomorphism_problem, libbpf_dedup
from linkdedup.concat import split_blobs
from linkdedup.pipeline import unmerged_table
from linkdedup.settings import LinkSettings
from objbtf.btf import Kind, parse_btf
from objbtf.btf.chunk import split_chunks
from objbtf.btf.header import BtfHeader
from objbtf.btf.kinds import KINDS
from objbtf.btf.writer import encode_btf
from objbtf.btf_file import read_btf_bytes
from objbtf.inspect.diff import function_decls
from objbtf.elf.consts import STT_OBJECT, STT_SECTION
from objbtf.elf.reader import ElfFile
from objbtf.features import Features

UNITS = FIXTURES / 'dedup'


@pytest.fixture
def units(tmp_path) -> list[Path]:
    objs = []
    for name, cc in (('unit_a', 'gcc'), ('unit_b', 'gcc'), ('unit_c', 'gcc'),
                     ('unit_d', 'gcc'), ('unit_e', 'clang')):
        need(cc)
        obj = tmp_path / f'{name}.o'
        r = objbtf('cc', '--', cc, '-g', '-O2', '-c', '-o', obj, UNITS / f'{name}.c')
        assert r.returncode == 0, r.stderr
        objs.append(obj)
    return objs


def link_relocatable(tmp_path: Path, objs: list[Path], name: str) -> Path:
    out = tmp_path / name
    run(need('ld'), '-r', '-o', out, *objs)
    return out


def libbpf_reference(path: Path):
    """libbpf's dedup of the plain concatenation, after the same passes."""
    with ElfFile.open(str(path)) as elf:
        full = unmerged_table(elf, str(path), Features())
    return parse_btf(libbpf_dedup(encode_btf(full)))



def test_link_matches_libbpf(units, tmp_path):
    linked = link_relocatable(tmp_path, units, 'all.o')
    out = tmp_path / 'out.btf'
    r = objbtf('link', '--output', out, linked)
    assert 'objects' in r.stderr
    ours = parse_btf(out.read_bytes())
    theirs = libbpf_reference(linked)
    assert kind_counts(ours) == kind_counts(theirs)
    assert isomorphism_problem(ours, theirs) is None
    assert objbtf('check', out).returncode == 0
    # Two definitions of struct device stay two; the FWD-only one stays FWD.
    names = Counter((t.kind.name, t.name) for _, t in ours.own())
    assert names['STRUCT', 'device'] == 2 and names['FWD', 'opaque'] == 1


def test_link_places_each_variable(units, tmp_path):
    linked = link_relocatable(tmp_path, units, 'all.o')
    out = tmp_path / 'out.btf'
    objbtf('link', '--output', out, linked)
    btf = parse_btf(out.read_bytes())
    with ElfFile.open(str(linked)) as elf:
        sec = {s.name: s for s in elf.sections}['.data..percpu']
        symbols = {s.name: s.value for s in elf.symbols() if s.shndx == sec.index and s.type == 1}
    [percpu] = [t for _, t in btf.own() if t.kind is Kind.DATASEC and t.name == '.data..percpu']
    assert percpu.size == sec.size
    assert {btf[v.type].name: v.offset for v in percpu.items} == symbols


def test_link_does_not_depend_on_object_order(units, tmp_path):
    forward = link_relocatable(tmp_path, units, 'fwd.o')
    backward = link_relocatable(tmp_path, list(reversed(units)), 'bwd.o')
    a, b = tmp_path / 'a.btf', tmp_path / 'b.btf'
    objbtf('link', '--output', a, forward)
    objbtf('link', '--output', b, backward)
    ta, tb = parse_btf(a.read_bytes()), parse_btf(b.read_bytes())
    assert [t.key() for _, t in ta.own() if t.kind is not Kind.DATASEC] == \
        [t.key() for _, t in tb.own() if t.kind is not Kind.DATASEC]


def test_link_without_hashes_hashes_the_objects_itself(units, tmp_path):
    """Without .BTF.objbtf the link hashes each blob as the encoder did, in
    -j processes: the same BTF, byte for byte, whatever -j."""
    linked = link_relocatable(tmp_path, units, 'all.o')
    bare = tmp_path / 'bare.o'
    run(need('objcopy'), '--remove-section', '.BTF.objbtf', linked, bare)
    objbtf('link', '--output', tmp_path / 'a.btf', linked)
    expected = (tmp_path / 'a.btf').read_bytes()
    for jobs in ('1', '2', '5'):
        out = tmp_path / f'bare-{jobs}.btf'
        r = objbtf('link', '-j', jobs, '--output', out, bare)
        assert 'no .BTF.objbtf' in r.stderr and 'hashes' in r.stderr
        assert out.read_bytes() == expected, jobs


def test_link_without_hashes_names_a_corrupt_blob(units, tmp_path):
    """A broken blob found by a worker is reported by the link, naming it."""
    linked = link_relocatable(tmp_path, units, 'all.o')
    bare = tmp_path / 'bare.o'
    run(need('objcopy'), '--remove-section', '.BTF.objbtf', linked, bare)
    with ElfFile.open(str(bare)) as elf:
        sec = elf.section_by_name('.BTF')
        blobs = split_blobs(elf.section_data(sec))
    last = blobs[-1]
    types_at = sec.offset + last.offset + last.header.hdr_len + last.header.type_off
    with open(bare, 'r+b') as f:                 # the last blob's first type: kind 31
        f.seek(types_at + 4)
        f.write((31 << 24).to_bytes(4, 'little'))
    r = objbtf('link', '-j', '3', '--output', tmp_path / 'out.btf', bare, check=False)
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert f'BTF blob {len(blobs)} at offset {last.offset}' in r.stderr
    assert not (tmp_path / 'out.btf').exists()


def test_link_module_in_place_is_split_on_base(units, tmp_path):
    base_linked = link_relocatable(tmp_path, units[1:3], 'base.o')
    base = tmp_path / 'base.btf'
    objbtf('link', '--output', base, base_linked)
    module = link_relocatable(tmp_path, [units[0], units[3]], 'mod.ko')   # unit_a has percpu
    with ElfFile.open(str(module)) as elf:
        assert elf.section_by_name('.rela.BTF').size > 0
    objbtf('link', '--base', base, module)
    assert objbtf('check', '--base', base, module).returncode == 0
    with ElfFile.open(str(module)) as elf:
        assert elf.section_by_name('.rela.BTF').size == 0
        split = parse_btf(elf.section_data(elf.section_by_name('.BTF')), parse_btf(base.read_bytes()))
    assert split.start_id == len(parse_btf(base.read_bytes())) + 1
    dump = run(need('bpftool'), '-B', base, 'btf', 'dump', 'file', module).stdout
    assert "FUNC 'd_find'" in dump


def test_a_rel_module_places_a_variable_by_its_section_symbol(tmp_path):
    """i386 (REL relocations): a variable without a symbol of its own is
    relocated against its section's symbol, its offset the addend held in
    the field, which ``ld -r`` moves with the section. The module's link
    places it where the same module built with the symbol places it, and
    where that symbol says it is."""
    need('gcc')
    ld = need('ld')
    first = tmp_path / 'counter_a.o'
    run('gcc', '-m32', '-O2', '-g', '-c', '-o', first, C_FIXTURES / 'counter_a.c')
    with_symbol = tmp_path / 'ptr32.o'
    run('gcc', '-m32', '-O2', '-g', '-c', '-o', with_symbol, C_FIXTURES / 'ptr32.c')
    without = tmp_path / 'ptr32-nosym.o'
    run(need('objcopy'), '--strip-symbol=percpu_sample', with_symbol, without)
    objbtf('encode', first, with_symbol, without)
    with ElfFile.open(str(without)) as elf:
        symbols = [elf.symbols()[r[1]] for r in elf.relocations(elf.section_by_name('.rel.BTF'))]
        targets = {(s.type, s.name or elf.sections[s.shndx].name) for s in symbols}
    assert targets == {(STT_SECTION, '.data..percpu'), (STT_OBJECT, 'percpu_list')}
    base_obj = tmp_path / 'base.o'
    run(ld, '-m', 'elf_i386', '-r', '-o', base_obj, first)
    base = tmp_path / 'base.btf'
    objbtf('link', '--output', base, base_obj)
    placed = []
    for obj in (with_symbol, without):
        module = tmp_path / f'{obj.stem}.ko'
        run(ld, '-m', 'elf_i386', '-r', '-o', module, first, obj)
        objbtf('link', '--base', base, module)
        assert objbtf('check', '--base', base, module).returncode == 0
        split = parse_btf(read_btf_bytes(str(module)), parse_btf(base.read_bytes()))
        [ds] = [t for _, t in split.own() if t.kind is Kind.DATASEC and t.name == '.data..percpu']
        placed.append({split[v.type].name: v.offset for v in ds.items})
        if obj == with_symbol:
            with ElfFile.open(str(module)) as elf:
                at = {s.name: s.value for s in elf.symbols() if s.name in placed[0]}
    assert at['percpu_sample'] > 0                   # counter_a's section comes first
    assert placed[0] == at
    assert placed[1] == placed[0]


def test_base_index_gives_the_same_split_btf_and_is_never_stale(units, tmp_path):
    """--base-index: the same bytes as without it; an index made for another
    base, or damaged, is made again, never used; a good one is kept as is."""
    from linkdedup.base_index import index_key, load_index
    bases = []
    for name, objs in (('one', units[1:3]), ('two', [units[1], units[2], units[4]])):
        base = tmp_path / f'{name}.btf'
        objbtf('link', '--output', base, link_relocatable(tmp_path, objs, f'{name}.o'))
        bases.append(base)
    assert bases[0].read_bytes() != bases[1].read_bytes()
    module = link_relocatable(tmp_path, [units[0], units[3]], 'mod.ko')
    index = tmp_path / 'base.index'

    def split(base: Path, *extra) -> tuple[bytes, str]:
        out = tmp_path / 'split.btf'
        r = objbtf('link', '--base', base, *extra, '--output', out, module)
        return out.read_bytes(), r.stderr

    for base in bases:
        plain, summary = split(base)
        assert 'base index' not in summary
        indexed, summary = split(base, '--base-index', index)
        assert indexed == plain
        found = int(summary.split('base index: ')[1].split()[0])
        assert found > 0, summary           # the index was used, not only made
        raw = base.read_bytes()
        assert load_index(str(index), raw, index_key(raw)) is not None
    # Made for the second base: stale for the first, which makes it again.
    raw = bases[0].read_bytes()
    assert load_index(str(index), raw, index_key(raw)) is None
    assert split(bases[0], '--base-index', index)[0] == split(bases[0])[0]
    kept = index.stat()
    assert split(bases[0], '--base-index', index)[0] == split(bases[0])[0]
    assert (index.stat().st_ino, index.stat().st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)
    index.write_bytes(index.read_bytes()[:100])          # damaged
    assert split(bases[0], '--base-index', index)[0] == split(bases[0])[0]
    assert load_index(str(index), raw, index_key(raw)) is not None
    # Where it cannot be written (a read-only tree): a warning, and the plain link.
    nowhere = tmp_path / 'missing' / 'base.index'
    out, summary = split(bases[0], '--base-index', nowhere)
    assert out == split(bases[0])[0] and not nowhere.parent.exists()
    assert f'warning: {nowhere}: cannot keep the base index there' in summary
    r = objbtf('link', '--base-index', index, '--output', tmp_path / 'x.btf', module,
               check=False)
    assert r.returncode == 2 and '--base-index needs --base' in r.stderr


@pytest.mark.parametrize('indexed', (False, True))
def test_a_base_that_breaks_the_kernels_rules_is_named(units, tmp_path, indexed):
    """A base is trusted as the link that wrote it checked it, but when a
    module's link fails on one it is named, not the module (tests/fuzz.py's
    base cases found a type of kind UNKN blamed on the module)."""
    base = tmp_path / 'base.btf'
    objbtf('link', '--output', base, link_relocatable(tmp_path, units[1:3], 'base.o'))
    raw = bytearray(base.read_bytes())
    offsets: list[int] = []
    btf = parse_btf(bytes(raw), offsets=offsets)
    hdr_len, type_off = (int.from_bytes(raw[i:i + 4], 'little') for i in (4, 8))
    ptr = next(i for i, t in enumerate(btf.types[1:], 1) if t.kind is Kind.PTR)
    info = hdr_len + type_off + offsets[ptr - 1] + 4
    assert int.from_bytes(raw[info:info + 4], 'little') >> 24 & 0x1f == Kind.PTR
    raw[info + 3] &= ~0x1f                  # the kind bits: BTF_KIND_UNKN, 0
    base.write_bytes(raw)
    module = link_relocatable(tmp_path, [units[0], units[3]], 'mod.ko')
    out = tmp_path / 'split.btf'
    extra = ('--base-index', tmp_path / 'base.index') if indexed else ()
    r = objbtf('link', '--base', base, *extra, '--output', out, module, check=False)
    assert r.returncode == 1 and 'Traceback' not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f'Error: {base}: the base BTF is damaged: type [{ptr}] UNKN '
        "'(anon)': kind UNKN cannot be a type"], r.stderr
    assert not out.exists()


def test_a_process_reuses_its_indexed_base_until_the_base_changes(units, tmp_path):
    """Module links in one process (a resident worker's) against one base
    read it and its index once; a base rewritten since is read again, and
    each split BTF is the one a fresh process writes."""
    from linkdedup import pipeline
    bases = []
    for name, objs in (('one', units[1:3]), ('two', [units[1], units[2], units[4]])):
        base = tmp_path / f'{name}.btf'
        objbtf('link', '--output', base, link_relocatable(tmp_path, objs, f'{name}.o'))
        bases.append(base.read_bytes())
    module = link_relocatable(tmp_path, [units[0], units[3]], 'mod.ko')
    base, index = tmp_path / 'base.btf', tmp_path / 'base.index'

    def fresh() -> bytes:
        out = tmp_path / 'fresh.btf'
        objbtf('link', '--base', base, '--base-index', index, '--output', out, module)
        return out.read_bytes()

    def in_process() -> tuple[bytes, object]:
        out = tmp_path / 'here.btf'
        pipeline.link(LinkSettings(str(module), Features(), base_path=str(base),
                                   base_index=str(index), output=str(out), jobs=1, quiet=True))
        return out.read_bytes(), pipeline._last_base[1]

    base.write_bytes(bases[0])
    first, used = in_process()
    again, reused = in_process()
    assert first == again == fresh() and reused is used
    base.write_bytes(bases[1])                  # relinked: another file, other bytes
    other, renewed = in_process()
    assert renewed is not used and other == fresh() and other != first


def test_base_index_key_follows_the_code_of_compiled_modules(tmp_path, monkeypatch):
    """The index's key covers the code it depends on: each module's source,
    found from its package, compiled or not (a compiled module's file is
    mypyc's shim, the same bytes for any code), and a C extension's."""
    import sys
    import types
    import objbtf
    from linkdedup.base_index import module_code
    package = tmp_path / 'toypkg'
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'grouping.cpython-311-x86_64-linux-gnu.so').write_bytes(b'the same shim')
    source = package / 'grouping.py'
    source.write_text('one grouping')
    toy = types.ModuleType('toypkg')
    toy.__file__ = str(package / '__init__.py')
    monkeypatch.setitem(sys.modules, 'toypkg', toy)
    assert module_code('toypkg.grouping') == b'one grouping'
    source.write_text('another grouping')
    assert module_code('toypkg.grouping') == b'another grouping'
    installed = Path(objbtf.__file__).parent / 'btf' / 'dedup.py'
    assert module_code('objbtf.btf.dedup') == installed.read_bytes()
    # A C extension's source: the hashes in C (_blob.c) are the index's too.
    (package / 'grouping.c').write_text('grouping in C')
    assert module_code('toypkg.grouping', '.c') == b'grouping in C'


def test_link_errors_name_the_file(tmp_path, units):
    missing = units[0].with_suffix('.c')
    r = objbtf('link', missing, check=False)
    assert r.returncode == 1 and r.stderr == f'Error: {missing}: No such file or directory\n'
    plain = tmp_path / 'plain.o'
    run('gcc', '-c', '-o', plain, UNITS / 'unit_a.c')
    r = objbtf('link', plain, check=False)
    assert r.returncode == 1 and str(plain) in r.stderr and 'no .BTF' in r.stderr
    assert r.stderr.count('\n') == 1


def test_non_percpu_variables_split_off(tmp_path):
    objs = []
    for name in ('unit_a', 'unit_b', 'unit_d'):
        obj = tmp_path / f'{name}.o'
        objbtf('cc', '--btf-features', 'default,global_var', '--', 'gcc', '-g', '-O2', '-c',
               '-o', obj, UNITS / f'{name}.c')
        objs.append(obj)
    linked = link_relocatable(tmp_path, objs, 'all.o')
    whole, base, split = tmp_path / 'whole.btf', tmp_path / 'base.btf', tmp_path / 'vars.btf'
    objbtf('link', '--output', whole, linked)
    r = objbtf('link', '--output', base, '--split-vars', split, linked)
    assert 'split off' in r.stderr
    full = parse_btf(whole.read_bytes())
    b = parse_btf(base.read_bytes())
    s = parse_btf(split.read_bytes(), b)
    assert [t.name for _, t in b.own() if t.kind is Kind.DATASEC] == ['.data..percpu']
    assert {t.name for _, t in s.own() if t.kind is Kind.DATASEC} == \
        {t.name for _, t in full.own() if t.kind is Kind.DATASEC} - {'.data..percpu'}
    assert kind_counts(b) + kind_counts(s) == kind_counts(full)
    assert objbtf('check', base).returncode == 0
    assert objbtf('check', '--base', base, split).returncode == 0
    dump = run(need('bpftool'), '-B', base, 'btf', 'dump', 'file', split).stdout
    assert "VAR 'b_devices'" in dump and "DATASEC '.bss'" in dump
    r = objbtf('link', '--output', tmp_path / 'x.btf', '--split-vars', tmp_path / 'y.btf',
               link_relocatable(tmp_path, units_default(tmp_path), 'dflt.o'), check=False)
    assert r.returncode == 1 and 'global_var' in r.stderr


def units_default(tmp_path: Path) -> list[Path]:
    obj = tmp_path / 'dflt_a.o'
    objbtf('cc', '--', 'gcc', '-g', '-O2', '-c', '-o', obj, UNITS / 'unit_a.c')
    return [obj]


def link_with_cache(linked: Path, cache: Path, out: Path) -> tuple[bytes, bool]:
    """(the BTF, whether the link replayed the cache) of one cached link."""
    r = objbtf('link', '--cache', cache, '--output', out, linked)
    return out.read_bytes(), 'replayed from the cache' in r.stderr


def fresh_link(linked: Path, out: Path) -> bytes:
    objbtf('link', '--output', out, linked)
    return out.read_bytes()


def test_cached_relink_gives_the_bytes_of_a_full_link(units, tmp_path):
    """A relink whose objects' types are unchanged replays the cache, even
    when the variables moved (another object order), and writes what a link
    without the cache writes."""
    cache = tmp_path / 'link.cache'
    forward = link_relocatable(tmp_path, units, 'fwd.o')
    first, replayed = link_with_cache(forward, cache, tmp_path / 'a.btf')
    assert not replayed and cache.exists()
    assert first == fresh_link(forward, tmp_path / 'ref_a.btf')
    again, replayed = link_with_cache(forward, cache, tmp_path / 'b.btf')
    assert replayed and again == first
    backward = link_relocatable(tmp_path, list(reversed(units)), 'bwd.o')
    moved, replayed = link_with_cache(backward, cache, tmp_path / 'c.btf')
    assert replayed
    assert moved == fresh_link(backward, tmp_path / 'ref_c.btf')
    assert moved != first            # the percpu variables did move


def test_cache_misses_when_an_object_has_new_types(units, tmp_path):
    cache = tmp_path / 'link.cache'
    link_with_cache(link_relocatable(tmp_path, units, 'old.o'), cache, tmp_path / 'a.btf')
    extra = tmp_path / 'extra.h'
    extra.write_text('struct added_by_test { int a; long b; };\n'
                     'struct added_by_test added_by_test_var __attribute__((used));\n')
    objbtf('cc', '--', 'gcc', '-g', '-O2', '-c', '-include', extra, '-o', units[1],
           UNITS / 'unit_b.c')
    changed = link_relocatable(tmp_path, units, 'new.o')
    out, replayed = link_with_cache(changed, cache, tmp_path / 'b.btf')
    assert not replayed
    assert out == fresh_link(changed, tmp_path / 'ref.btf')
    assert "STRUCT 'added_by_test'" in run(need('bpftool'), 'btf', 'dump', 'file',
                                           tmp_path / 'b.btf').stdout


def test_cache_works_on_the_links_own_hashes(units, tmp_path):
    """Without .BTF.objbtf the link's own hashes key the cache: they are the
    encoder's, so a link of the same objects with their chunks replays it."""
    cache = tmp_path / 'link.cache'
    linked = link_relocatable(tmp_path, units, 'all.o')
    bare = tmp_path / 'bare.o'
    run(need('objcopy'), '--remove-section', '.BTF.objbtf', linked, bare)
    first, replayed = link_with_cache(bare, cache, tmp_path / 'a.btf')
    assert not replayed and cache.exists()
    again, replayed = link_with_cache(linked, cache, tmp_path / 'b.btf')
    assert replayed and again == first


def test_cache_is_for_vmlinux_only(units, tmp_path):
    linked = link_relocatable(tmp_path, units, 'all.o')
    r = objbtf('link', '--cache', tmp_path / 'c', '--base', linked, '-o', tmp_path / 'o.btf',
               linked, check=False)
    assert r.returncode == 1 and '--cache is for vmlinux' in r.stderr


KFUNCS = FIXTURES / 'kfuncs'


def kfunc_program(tmp_path: Path, set_flags: str, *defines: str) -> Path:
    """The kfunc fixture compiled through objbtf cc and linked by ld into an
    executable, as vmlinux is; ``set_flags``: its kfunc sets' header flags."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    objs = []
    for name in ('kf_core', 'kf_other'):
        obj = tmp_path / f'{name}.o'
        objbtf('cc', '--', need('gcc'), '-g', '-O2', f'-DSET_FLAGS={set_flags}', *defines,
               '-c', '-o', obj, KFUNCS / f'{name}.c')
        objs.append(obj)
    out = tmp_path / 'kfuncs'
    run(need('ld'), '-e', 'kf_core_user', '-o', out, *objs)
    return out


def decl_tags(btf) -> set[tuple[str, str, int]]:
    """(tag, name of the tagged type, component_idx) of every DECL_TAG."""
    return {(t.name, btf[t.type].name, t.component_idx) for _, t in btf.own()
            if t.kind is Kind.DECL_TAG}


def expected_tags(kfuncs: dict[str, set[str]], btf) -> set[tuple[str, str, int]]:
    funcs = {t.name for _, t in btf.own() if t.kind is Kind.FUNC}
    return {(tag, name, -1) for name, tags in kfuncs.items() if name in funcs for tag in tags}


@pytest.mark.parametrize('set_flags, marked', [('BTF_SET8_KFUNCS', True), ('0', False)],
                         ids=['sets-marked', 'sets-unmarked'])
def test_kfuncs_get_their_decl_tags(tmp_path, kernel_loader, set_flags, marked):
    """Marked sets (kernel 6.9 on): the functions of the marked sets only;
    no set marked (6.1): those of every set8; never a list's or a 4-byte
    set's, never a function without a FUNC (dropped, or none at all)."""
    from btf_ids_oracle import btf_ids_kfuncs
    program = kfunc_program(tmp_path, set_flags)
    kfuncs, found_marked = btf_ids_kfuncs(program)
    assert found_marked == marked
    # What the fixture's source puts in its sets, as readelf and objcopy see it.
    assert set(kfuncs) == {'kf_alpha', 'kf_beta', 'kf_same_name', 'kf_delta',
                           'kf_nowhere'} | (set() if marked else {'kf_hidden'})
    out = tmp_path / 'out.btf'
    r = objbtf('link', '--output', out, program)
    btf = parse_btf(out.read_bytes())
    tags = decl_tags(btf)
    assert tags == expected_tags(kfuncs, btf)
    funcs = {t.name for _, t in btf.own() if t.kind is Kind.FUNC}
    assert {'kf_gamma', 'kf_listed', 'kf_in_set'} <= funcs             # FUNCs, not kfuncs
    assert not funcs & {'kf_same_name', 'kf_nowhere'}              # a kfunc, but no FUNC
    assert (('bpf_fastcall', 'kf_beta', -1) in tags) == marked
    tagged = {name for _, name, _ in tags}
    assert f'kfuncs: {len(kfuncs)} in .BTF_ids, {len(tagged)} tagged bpf_kfunc, ' \
           f'{len(kfuncs) - len(tagged)} without a FUNC' in r.stderr
    assert objbtf('check', out).returncode == 0
    assert "DECL_TAG 'bpf_kfunc'" in run(need('bpftool'), 'btf', 'dump', 'file', out).stdout
    verdict = kernel_loader(out.read_bytes())
    assert verdict.ok, verdict.log[-2000:]
    for off in ('-decl_tag_kfuncs', '-decl_tag'):         # pahole needs both
        raw = tmp_path / f'{off}.btf'
        r = objbtf('link', '--btf-features', f'default,{off}', '--output', raw, program)
        untagged = parse_btf(raw.read_bytes())
        assert not decl_tags(untagged) and '  kfuncs: ' not in r.stderr
        assert kind_counts(untagged) + Counter({'DECL_TAG': len(tags)}) == kind_counts(btf)


def type_hashes(elf: ElfFile) -> list:
    chunks = split_chunks(elf.section_data(elf.section_by_name('.BTF.objbtf')), elf.byteorder)
    return [(list(c.hashes), list(c.offsets), c.flags, c.btf_size) for c in chunks]


def test_cache_misses_when_a_kfunc_joins_a_set(tmp_path):
    """kf_gamma added to a set changes no type, only .BTF_ids: the cache
    must not replay the link from before."""
    cache = tmp_path / 'link.cache'
    before = kfunc_program(tmp_path / 'before', 'BTF_SET8_KFUNCS')
    after = kfunc_program(tmp_path / 'after', 'BTF_SET8_KFUNCS', '-DGAMMA_IS_KFUNC')
    with ElfFile.open(str(before)) as a, ElfFile.open(str(after)) as b:
        assert a.section_data(a.section_by_name('.BTF')) == \
            b.section_data(b.section_by_name('.BTF'))
        assert type_hashes(a) == type_hashes(b)          # the objects' names differ
    link_with_cache(before, cache, tmp_path / 'a.btf')
    out, replayed = link_with_cache(after, cache, tmp_path / 'b.btf')
    assert not replayed
    assert out == fresh_link(after, tmp_path / 'ref.btf')
    assert ('bpf_kfunc', 'kf_gamma', -1) in decl_tags(parse_btf(out))
    again, replayed = link_with_cache(after, cache, tmp_path / 'c.btf')
    assert replayed and again == out


def kfunc_module(tmp_path: Path, set_flags: str) -> Path:
    """kf_other.c (its kfunc set's header flags ``set_flags``) linked by
    ``ld -r`` as a .ko is, BTF not linked yet."""
    obj = tmp_path / 'kf_other.o'
    objbtf('cc', '--', need('gcc'), '-g', '-O2', f'-DSET_FLAGS={set_flags}', '-c', '-o', obj,
           KFUNCS / 'kf_other.c')
    return link_relocatable(tmp_path, [obj], 'kf_other.ko')


def kfunc_vmlinux(tmp_path: Path, set_flags: str | None) -> Path:
    """kf_core.c linked as vmlinux is, its BTF linked in place; None: the raw BTF
    of such a file, which cannot say whether its kernel marks kfunc sets."""
    obj = tmp_path / 'kf_core.o'
    objbtf('cc', '--', need('gcc'), '-g', '-O2', f'-DSET_FLAGS={set_flags or 0}', '-c', '-o', obj,
           KFUNCS / 'kf_core.c')
    tmp = tmp_path / 'tmp_vmlinux'
    run(need('ld'), '-e', 'kf_core_user', '-o', tmp, obj)
    if set_flags is None:
        raw = tmp_path / 'vmlinux.btf'
        objbtf('link', '--output', raw, tmp)
        return raw
    # As link-vmlinux.sh does: the BTF as an object, linked with the code.
    btf_object = tmp_path / 'vmlinux.btf.o'
    objbtf('link', '--output', btf_object, tmp)
    run(need('objcopy'), '--remove-section=.BTF', '--remove-section=.rela.BTF',
        '--remove-section=.BTF.objbtf', obj)
    vmlinux = tmp_path / 'vmlinux'
    run(need('ld'), '-e', 'kf_core_user', '-o', vmlinux, obj, btf_object)
    return vmlinux


@pytest.mark.parametrize('module_flags, base_flags, tagged', [
    ('BTF_SET8_KFUNCS', 'BTF_SET8_KFUNCS', True),   # 6.9 on, as pahole 1.27+ tags it
    ('BTF_SET8_KFUNCS', None, True),                # the module's mark is enough
    ('0', 'BTF_SET8_KFUNCS', False),                # unmarked on a kernel that marks: no kfunc set
    ('0', '0', True),                               # 6.1: every set8 is a kfunc set
    ('0', None, False),                             # a raw base cannot say: pahole's reading
], ids=['marked', 'marked-raw-base', 'unmarked-on-6.9', 'unmarked-on-6.1', 'unmarked-raw-base'])
def test_module_kfuncs_get_their_decl_tags(tmp_path, module_flags, base_flags, tagged):
    """A module's kfuncs get their tags in its split BTF: those of its marked
    sets; those of its unmarked set8s when vmlinux, its base, marks none."""
    from btf_ids_oracle import btf_ids_kfuncs
    base = kfunc_vmlinux(tmp_path, base_flags)
    module = kfunc_module(tmp_path, module_flags)
    listed, _ = btf_ids_kfuncs(module)
    assert set(listed) == {'kf_delta', 'kf_nowhere'}            # kf_nowhere has no FUNC
    r = objbtf('link', '--base', base, module)
    assert objbtf('check', '--base', base, module).returncode == 0
    with ElfFile.open(str(module)) as elf:
        split = parse_btf(elf.section_data(elf.section_by_name('.BTF')),
                          parse_btf(read_btf_bytes(str(base))))
    tags = {(t.name, split[t.type].name, t.component_idx) for _, t in split.own()
            if t.kind is Kind.DECL_TAG}
    assert tags == ({('bpf_kfunc', 'kf_delta', -1)} if tagged else set())
    assert ('kfuncs: 2 in .BTF_ids, 1 tagged bpf_kfunc, 1 without a FUNC' in r.stderr) == tagged
    dump = run(need('bpftool'), '-B', base, 'btf', 'dump', 'file', module).stdout
    assert ("DECL_TAG 'bpf_kfunc'" in dump) == tagged


# --- BTF features of Linux 7.x: "layout" and "attributes" --------------------

def test_layout_is_the_newest_pahole_s(tmp_path, newest_pahole):
    """With ``layout``, vmlinux's BTF has the newest pahole's 32-byte header
    and kind layout section, laid out as it lays them out (types, layout,
    strings); split BTF gets none, as pahole adds it to base BTF only."""
    obj = encoded_c('gcc', C_FIXTURES / 'scopes.c', tmp_path / 'scopes.o', 'default')
    theirs, ours = tmp_path / 'pahole.btf', tmp_path / 'objbtf.btf'
    run(newest_pahole, '-J', '--btf_features=default,layout', '--btf_encode_detached', theirs,
        obj)
    objbtf('link', '--btf-features', 'default,layout', '--output', ours, obj)
    blobs = {side: path.read_bytes() for side, path in (('pahole', theirs), ('objbtf', ours))}
    shapes = {}
    for side, blob in blobs.items():
        h = BtfHeader.read(blob)
        shapes[side] = (h.hdr_len, h.type_off, h.layout_off - h.type_len,
                        h.str_off - h.layout_off - h.layout_len, h.kind_layout(blob))
    assert shapes['objbtf'] == shapes['pahole'] == (32, 0, 0, 0, KINDS.layout)
    assert objbtf('diff', theirs, ours).returncode == 0
    split = tmp_path / 'split.btf'
    objbtf('link', '--btf-features', 'default,layout', '--base', ours, '--output', split, obj)
    assert BtfHeader.read(split.read_bytes()).hdr_len == 24


def test_arena_kfuncs_get_the_newest_pahole_s_attributes(tmp_path, newest_pahole, kernel_loader):
    """With ``attributes``, each pointer a kfunc's KF_ARENA_* flags name (its
    return value, first or second argument) points through an attribute
    TYPE_TAG 'address_space(1)' (kind_flag set), as the newest pahole
    encodes it from the same executable; without, none."""
    obj = tmp_path / 'kf_arena.o'
    objbtf('cc', '--', need('gcc'), '-g', '-O2', '-c', '-o', obj, KFUNCS / 'kf_arena.c')
    program = tmp_path / 'arena'
    run(need('ld'), '-e', 'kf_arena_user', '-o', program, obj)
    theirs, ours = tmp_path / 'pahole.btf', tmp_path / 'objbtf.btf'
    run(newest_pahole, '-J', '--btf_features=default,attributes', '--btf_encode_detached', theirs,
        program)
    objbtf('link', '--btf-features', 'default,attributes', '--output', ours, program)
    decls = {side: function_decls(parse_btf(path.read_bytes()))
             for side, path in (('pahole', theirs), ('objbtf', ours))}
    assert decls['objbtf'] == decls['pahole']
    btf = parse_btf(ours.read_bytes())
    tagged = {}
    for _, func in btf.own():
        if func.kind is Kind.FUNC:
            proto = btf[func.type]
            slots = [('return', proto.type)] + [(p.name, p.type) for p in proto.items]
            tagged[func.name] = [slot for slot, ref in slots
                                 if btf[ref].kind is Kind.PTR
                                 and btf[btf[ref].type].kind is Kind.TYPE_TAG
                                 and btf[btf[ref].type].name == 'address_space(1)'
                                 and btf[btf[ref].type].kflag == 1]
    assert tagged == {'kf_arena_alloc': ['return', 'addr'], 'kf_arena_free': ['page'],
                      'kf_arena_first': ['page'], 'kf_plain': [], 'kf_arena_user': []}
    assert objbtf('check', ours).returncode == 0
    verdict = kernel_loader(ours.read_bytes())
    assert verdict.ok, verdict.log[-2000:]
    plain = tmp_path / 'plain.btf'
    objbtf('link', '--output', plain, program)
    assert 'address_space' not in run(need('bpftool'), 'btf', 'dump', 'file', plain).stdout
