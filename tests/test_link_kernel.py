"""objbtf link on the reference kernel, against pahole, libbpf, bpftool and the kernel."""
from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from btf_content import percpu_symbols, unexplained
from btf_shapes import kind_counts
from conftest import need, objbtf, run
from kbuild_tree import REFERENCE_MODULES, vmlinux_members
from kernel_matrix import REFERENCE
from kernel_tree import EXTRA_VMLINUX_OBJECTS, KALLSYMS_OBJECT, TMP_VMLINUX, relink_module
from linkdedup.archive import thin_member_paths
from objbtf.btf import Kind, parse_btf
from objbtf.btf.function_rules import DROPPING_FACTS, FACT_WEAK, function_key
from objbtf.elf.reader import ElfFile
from newest_pahole import funcs
from stock_btf import pahole_flags

pytestmark = pytest.mark.kernel
STT_OBJECT, STT_FUNC, STB_WEAK = 1, 2, 2


@pytest.fixture(scope='module')
def linked(encoded_kernel, tmp_path_factory) -> tuple[Path, str]:
    """(final raw BTF, the link's summary) of the encoded kernel."""
    out = tmp_path_factory.mktemp('link') / 'vmlinux.btf'
    r = objbtf('link', '--output', out, encoded_kernel / TMP_VMLINUX)
    return out, r.stderr


@pytest.fixture(scope='module')
def newest_funcs(newest_pahole, request) -> dict[str, list[str]]:
    """The newest pahole's FUNCs, with the flags the reference tree's
    scripts/Makefile.btf gives it, on the reference build's vmlinux, which
    holds its objects' DWARF."""
    build = request.getfixturevalue(REFERENCE)
    return funcs(newest_pahole, build.build / 'vmlinux', ('-J', *pahole_flags(build)))


def function_symbols(path: Path) -> dict[str, set[int]]:
    with ElfFile.open(str(path)) as elf:
        out: dict[str, set[int]] = {}
        for s in elf.symbols():
            if s.type == STT_FUNC:
                out.setdefault(s.name, set()).add(s.value)
        return out


def test_content_matches_pahole_but_for_functions(linked, pahole_vmlinux_btf, encoded_kernel,
                                                  newest_funcs):
    """pahole 1.24 on the same objects' vmlinux, by content (btf_content.py:
    every named type, VAR and shared FUNC's prototype alike but for the
    documented differences); which FUNCs each has, by the function rules."""
    ours = parse_btf(linked[0].read_bytes())
    theirs = parse_btf(pahole_vmlinux_btf)
    percpu = {name for name, _ in percpu_symbols(encoded_kernel / TMP_VMLINUX)}
    assert unexplained(theirs, ours, percpu, vmlinux_members(encoded_kernel)) == []
    a, b = kind_counts(ours), kind_counts(theirs)
    # pahole 1.24 tags no kfunc (1.27 does, though not on 6.1: docs/pahole-differences.md)
    kfunc_tags = sum(1 for _, t in ours.own()
                     if t.kind is Kind.DECL_TAG and t.name in ('bpf_kfunc', 'bpf_fastcall'))
    assert a['DECL_TAG'] == b['DECL_TAG'] + kfunc_tags
    # objbtf follows the newest pahole's function rules, which 1.24 lacks
    # (docs/pahole-differences.md).
    # The FUNCs only objbtf has: functions whose only symbols are clones
    # (foo.constprop.0, foo.isra.0), which 1.24 matched by exact name only:
    # those the newest pahole keeps too (no parameter optimized out, or a
    # clone split into hot and cold parts).
    ours_f = {t.name for _, t in ours.own() if t.kind is Kind.FUNC}
    theirs_f = {t.name for _, t in theirs.own() if t.kind is Kind.FUNC}
    symbols = function_symbols(encoded_kernel / TMP_VMLINUX)
    keys = {function_key(n) for n in symbols} - {None}
    only_ours = ours_f - theirs_f
    assert only_ours and all(n not in symbols and n in keys for n in only_ours)
    # The FUNCs only 1.24 has: names the newest pahole leaves out as well,
    # among them every key at several addresses, as the summary counts.
    only_theirs = theirs_f - ours_f
    assert only_theirs and not only_theirs & newest_funcs.keys()
    addresses: dict[str, set[int]] = {}
    for name, values in symbols.items():
        if function_key(name):
            addresses.setdefault(function_key(name), set()).update(values)
    ambiguous = {k for k, v in addresses.items() if len(v) > 1}
    assert not ambiguous & ours_f and only_theirs & ambiguous
    dropped = re.search(r'functions dropped: (\d+) with prototypes that differ between '
                        r'objects, (\d+) at several addresses, (\d+) with parameters in '
                        r'unexpected registers, (\d+) with packed structs on the stack, '
                        r'(\d+) with parameters reordered, (\d+) clones with parameters '
                        r'optimized out', linked[1])
    assert dropped, linked[1]
    assert sum(map(int, dropped.groups())) >= len(only_theirs)
    assert len(only_theirs & ambiguous) <= int(dropped[2]) <= len(ambiguous)


def test_kfuncs_get_their_decl_tag(linked, encoded_kernel):
    """The kfuncs of vmlinux's .BTF_ids, as readelf and objcopy show them:
    those of the sets marked BTF_SET8_KFUNCS (6.1 marks none: then those of
    every set8; test_kbuild checks 6.1's)."""
    from btf_ids_oracle import btf_ids_kfuncs
    kfuncs, marked = btf_ids_kfuncs(encoded_kernel / TMP_VMLINUX)
    assert marked and len(kfuncs) >= 20
    ours = parse_btf(linked[0].read_bytes())
    funcs = {i: t.name for i, t in ours.own() if t.kind is Kind.FUNC}
    tags = [(t.name, funcs.get(t.type), t.component_idx) for _, t in ours.own()
            if t.kind is Kind.DECL_TAG and t.name in ('bpf_kfunc', 'bpf_fastcall')]
    expected = {(tag, name, -1) for name, names in kfuncs.items() if name in funcs.values()
                for tag in names}
    assert sorted(tags) == sorted(expected)          # each once, on its FUNC
    tagged = {name for _, name, _ in expected}
    assert f'kfuncs: {len(kfuncs)} in .BTF_ids, {len(tagged)} tagged bpf_kfunc' in linked[1]


def test_every_percpu_variable_at_its_symbol(linked, pahole_vmlinux_btf, encoded_kernel):
    ours = parse_btf(linked[0].read_bytes())
    [percpu] = [t for _, t in ours.own() if t.kind is Kind.DATASEC]
    assert percpu.name == '.data..percpu'
    placed = Counter((ours[v.type].name, v.offset) for v in percpu.items)
    assert placed == percpu_symbols(encoded_kernel / TMP_VMLINUX)
    theirs = parse_btf(pahole_vmlinux_btf)
    pahole_vars = {t.name for _, t in theirs.own() if t.kind is Kind.VAR}
    assert pahole_vars <= {name for name, _ in placed}
    assert len(placed) >= 201
    offsets = [v.offset for v in percpu.items]
    assert offsets == sorted(offsets)


def test_final_btf_is_valid_three_ways(linked, kernel_loader):
    raw = linked[0].read_bytes()
    assert objbtf('check', linked[0]).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', linked[0]).stdout
    assert dump.count('\n') > 40000
    verdict = kernel_loader(raw)
    assert verdict.ok, verdict.log[-2000:]


def test_link_writes_an_object_the_kernel_can_link_in(encoded_kernel, linked, tmp_path):
    out = tmp_path / '.btf.vmlinux.bin.o'
    objbtf('link', '--output', out, encoded_kernel / TMP_VMLINUX)
    with ElfFile.open(str(out)) as elf:
        sec = elf.section_by_name('.BTF')
        assert sec.flags & 2 and elf.e_type == 1
        assert elf.section_data(sec) == linked[0].read_bytes()
    run(need('ld'), '-r', '-o', tmp_path / 'x.o', out)


def test_link_in_place(encoded_kernel, linked, tmp_path):
    copy = tmp_path / 'vmlinux'
    shutil.copyfile(encoded_kernel / TMP_VMLINUX, copy)
    objbtf('link', copy)
    with ElfFile.open(str(copy)) as elf:
        assert elf.section_data(elf.section_by_name('.BTF')) == linked[0].read_bytes()


def test_link_is_reproducible_whatever_the_object_order_and_jobs(encoded_kernel, linked,
                                                                 tmp_path):
    """Objects linked in reverse order: the same types, byte for byte; only
    the percpu offsets differ, as the layout itself does.  And the number of
    processes changes nothing."""
    members = run('ar', 't', encoded_kernel / 'vmlinux.a').stdout.split()
    members.reverse()
    run('ar', 'rcST', tmp_path / 'reversed.a', *[encoded_kernel / m for m in members])
    from kernel_tree import link_vmlinux
    other = link_vmlinux(encoded_kernel, str(tmp_path / 'reversed'), str(tmp_path / 'reversed.a'))
    out = tmp_path / 'again.btf'
    objbtf('link', '-j', '1', '--output', out, other)
    first, again = parse_btf(linked[0].read_bytes()), parse_btf(out.read_bytes())
    assert [t.key() for _, t in first.own() if t.kind is not Kind.DATASEC] == \
        [t.key() for _, t in again.own() if t.kind is not Kind.DATASEC]
    [percpu] = [t for _, t in again.own() if t.kind is Kind.DATASEC]
    placed = Counter((again[v.type].name, v.offset) for v in percpu.items)
    assert placed == percpu_symbols(other)
    assert out.read_bytes() != linked[0].read_bytes()    # the layout did change
    for jobs in ('2', '3'):
        objbtf('link', '-j', jobs, '--output', tmp_path / 'twice.btf', other)
        assert (tmp_path / 'twice.btf').read_bytes() == out.read_bytes(), jobs


def test_link_without_hashes_gives_the_same_btf(encoded_kernel, linked, tmp_path):
    """vmlinux without .BTF.objbtf: the link hashes every object's types in
    -j processes, to the same types as with the hashes the encoder wrote.
    Only the function facts the chunks carried are missing, which it says:
    it keeps the functions only those facts drop, and, not knowing which
    definitions are weak, may take a weak one's prototype (objbtf diff)."""
    bare = tmp_path / 'bare'
    run(need('objcopy'), '--remove-section', '.BTF.objbtf', encoded_kernel / TMP_VMLINUX, bare)
    out = tmp_path / 'out.btf'
    r = objbtf('link', '-j', '2', '--output', out, bare)
    assert 'hashes its objects\' types itself' in r.stderr and 'keeps the functions' in r.stderr
    diff = objbtf('diff', '--format', 'json', linked[0], out, check=False)
    doc = json.loads(diff.stdout)
    facts = chunk_facts(encoded_kernel / TMP_VMLINUX)
    dropping = {n for n, f in facts.items() if f & DROPPING_FACTS}
    weak = {n for n, f in facts.items() if f & FACT_WEAK}
    assert doc['types'] == doc['variables'] == {'added': [], 'removed': [], 'changed': []}
    functions = doc['functions']
    assert functions['removed'] == [] and functions['added']
    assert {e['name'] for e in functions['added']} <= dropping
    assert {e['name'] for e in functions['changed']} <= weak


def chunk_facts(path: Path) -> dict[str, int]:
    """Every object's function facts in the chunks of ``path``, or-ed."""
    from linkdedup.functions import merged_facts
    from objbtf.btf.chunk import split_chunks
    with ElfFile.open(str(path)) as elf:
        data = elf.section_data(elf.section_by_name('.BTF.objbtf'))
        return merged_facts(split_chunks(data, elf.byteorder))


def test_every_object_of_vmlinux_a_is_named(encoded_kernel, linked, tmp_path):
    """--objects vmlinux.a, run from the top of the tree as Kbuild runs it:
    every member has a chunk (those without types, assembly, one without
    .BTF), and the BTF is the same as without the list."""
    out = tmp_path / 'listed.btf'
    r = objbtf('link', '--objects', 'vmlinux.a', '--output', out, TMP_VMLINUX,
               cwd=encoded_kernel)
    assert r.returncode == 0 and 'warning' not in r.stderr, r.stderr
    assert out.read_bytes() == linked[0].read_bytes()
    # Every input of the link has a chunk: the summary counts them, with and without types.
    members = run('ar', 't', 'vmlinux.a', cwd=encoded_kernel).stdout.split()
    assert thin_member_paths((encoded_kernel / 'vmlinux.a').read_bytes(), 'vmlinux.a') == \
        [os.path.normpath(m) for m in members]
    inputs = members + [o for o in (*EXTRA_VMLINUX_OBJECTS, KALLSYMS_OBJECT)
                        if (encoded_kernel / o).exists()]
    typeless = [o for o in inputs if '.BTF' not in section_names(encoded_kernel / o)]
    assert len(members) > 800 and typeless
    assert f'{len(inputs) - len(typeless)} objects (and {len(typeless)} without types)' \
        in linked[1]


def section_names(path: Path) -> set[str]:
    with ElfFile.open(str(path)) as elf:
        return {s.name for s in elf.sections}


def test_modules_get_split_btf(encoded_kernel, linked, tmp_path):
    base = linked[0]
    kos = sorted(encoded_kernel.rglob('*.ko'))
    assert {ko.name for ko in kos} >= REFERENCE_MODULES
    for ko in kos:
        # Each module's .mod lists its objects (paths from the top of the tree).
        r = objbtf('link', '--base', base, '--objects', ko.with_suffix('.mod'), ko,
                   cwd=encoded_kernel)
        assert r.returncode == 0 and 'warning' not in r.stderr, r.stderr
        assert objbtf('check', '--base', base, ko).returncode == 0
        dump = run(need('bpftool'), '-B', base, 'btf', 'dump', 'file', ko).stdout
        first_id = len(parse_btf(base.read_bytes())) + 1
        assert dump.startswith(f'[{first_id}] ')       # split: ids continue from vmlinux
        with ElfFile.open(str(ko)) as elf:
            btf = parse_btf(elf.section_data(elf.section_by_name('.BTF')), parse_btf(base.read_bytes()))
            init = {function_key(s.name) for s in elf.symbols()
                    if s.type == STT_FUNC and s.shndx}
        assert 0 < len(btf) < 2000
        funcs = {t.name for _, t in btf.own() if t.kind is Kind.FUNC}
        assert funcs and funcs <= init      # named by their symbols' keys (clones too)


def test_module_links_through_the_base_index_give_the_same_bytes(encoded_kernel, linked,
                                                                 tmp_path):
    """Every module, linked with and without --base-index: the same split BTF,
    byte for byte; one index serves them all, and most of each module's
    types are found in it by hash."""
    base = linked[0]
    index = tmp_path / 'vmlinux.index'
    kos = sorted(encoded_kernel.rglob('*.ko'))
    assert kos
    found_all = total_all = 0
    for ko in kos:
        relink_module(encoded_kernel, ko)     # other tests link the modules in place
        plain, indexed = tmp_path / 'plain.btf', tmp_path / 'indexed.btf'
        objbtf('link', '--quiet', '--base', base, '--output', plain, ko, cwd=encoded_kernel)
        r = objbtf('link', '--base', base, '--base-index', index, '--output', indexed, ko,
                   cwd=encoded_kernel)
        assert indexed.read_bytes() == plain.read_bytes(), ko
        found, total = (int(w) for w in r.stderr.split('base index: ')[1].split()[0:3:2])
        assert 0 < found < total, (ko, r.stderr)
        found_all += found
        total_all += total
        if ko == kos[0]:
            made = index.stat().st_ino
    assert index.stat().st_ino == made          # made once, then only read
    assert found_all > total_all / 2


def test_dedup_matches_libbpf_on_the_full_concatenation(encoded_kernel, linked):
    """The fast path (merge by hash, then dedup) against libbpf's btf__dedup
    on the plain concatenation of every object's types."""
    from libbpf_oracle import isomorphism_problem, libbpf_dedup
    from linkdedup.pipeline import unmerged_table
    from objbtf.btf.writer import encode_btf
    from objbtf.features import Features
    path = str(encoded_kernel / TMP_VMLINUX)
    with ElfFile.open(path) as elf:
        full = unmerged_table(elf, path, Features())
    assert len(full) > 1_000_000
    theirs = parse_btf(libbpf_dedup(encode_btf(full)))
    ours = parse_btf(linked[0].read_bytes())
    assert kind_counts(ours) == kind_counts(theirs)
    assert isomorphism_problem(ours, theirs) is None
