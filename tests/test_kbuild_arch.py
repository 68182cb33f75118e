"""The Kbuild integration with clang, on arm64 and on i386: real Linux builds,
``make LLVM=1 OBJBTF=...`` of 6.1 and 6.12 (clang, ld.lld, llvm-objcopy; the
reference config), 6.1's ``make ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-
OBJBTF=...`` (Debian's cross gcc and binutils; tests/fixtures/kconfig/small.config)
and 6.1 for i386 (x86's tinyconfig, with SMP: 4-byte pointers, REL relocations),
each once per session (conftest.py, kbuild_tree.py), checked as the gcc
build of test_kbuild.py is: the running kernel, pahole on the same vmlinux,
every percpu variable, the modules, a rebuild.
"""
from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from btf_content import named_types, percpu_symbols, unexplained
from btf_shapes import kind_counts
from conftest import need, objbtf, run
from kbuild_tree import (KernelBuild, apply, kernel_source, layout_files, patched_files,
                         objbtf_command, sections, touched, vmlinux_members)
from kernel_matrix import VERSIONS
from objbtf.btf import Kind, parse_btf
from objbtf.btf.validate import validate_bytes
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile

#: The builds the running x86_64 kernel can judge: i386's BTF has 4-byte
#: pointers, which a 64-bit kernel's checks take as 8 bytes.
LOADABLE = ['kbuild_6_1_llvm', 'kbuild_6_12_llvm', 'kbuild_6_1_arm64']
BUILDS = [*LOADABLE, 'kbuild_6_1_i386']


@pytest.fixture(params=BUILDS)
def tree(request) -> KernelBuild:
    return request.getfixturevalue(request.param)


@pytest.fixture(params=LOADABLE)
def loadable_tree(request) -> KernelBuild:
    return request.getfixturevalue(request.param)


def section_names(obj: Path) -> dict[str, bytes]:
    """An object's sections by name (the first of a repeated name)."""
    with ElfFile.open(str(obj)) as elf:
        return {s.name: elf.section_data(s) for s in reversed(elf.sections)}


def vmlinux_btf(tree: KernelBuild):
    return parse_btf(sections(tree.build / 'vmlinux')['.BTF'][0])


@pytest.mark.kernel
def test_vmlinux_btf_is_accepted_by_the_kernel(loadable_tree, kernel_loader):
    """objbtf's rules, bpftool, and the running (x86_64) kernel's
    BPF_BTF_LOAD: BTF is the same format on every little-endian machine."""
    vmlinux = loadable_tree.build / 'vmlinux'
    assert objbtf('check', vmlinux).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    assert dump.stdout.count('\n') > 20000
    verdict = kernel_loader(sections(vmlinux)['.BTF'][0])
    assert verdict.ok, verdict.log[-2000:]


@pytest.mark.kernel
def test_vmlinux_btf_matches_pahole_on_the_same_vmlinux(tree, tmp_path):
    """pahole reads the final vmlinux, which keeps its DWARF: by content,
    every named type, VAR and shared FUNC's prototype alike but for what the
    link documents (btf_content.py: kfunc tags, the variables pahole
    misses, weak definitions)."""
    ours = vmlinux_btf(tree)
    vmlinux = tree.build / 'vmlinux'
    out = tmp_path / 'pahole.btf'
    run(need('pahole'), '-J', '--btf_gen_floats', '--lang_exclude=rust',
        '--btf_encode_detached', out, vmlinux)
    theirs = parse_btf(out.read_bytes())
    assert named_types(theirs) > 500
    percpu = {name for name, _ in percpu_symbols(vmlinux)}
    assert unexplained(theirs, ours, percpu, vmlinux_members(tree.build)) == []
    a, b = kind_counts(ours), kind_counts(theirs)
    kfunc_tags = sum(1 for _, t in ours.own() if t.kind is Kind.DECL_TAG and t.name == 'bpf_kfunc')
    assert a['DECL_TAG'] == b['DECL_TAG'] + kfunc_tags
    pahole_vars = {t.name for _, t in theirs.own() if t.kind is Kind.VAR}
    assert pahole_vars <= {t.name for _, t in ours.own() if t.kind is Kind.VAR}
    assert a['DATASEC'] == b['DATASEC'] == 1


@pytest.mark.kernel
def test_every_percpu_variable_at_its_symbol(tree):
    """Each percpu VAR at the offset vmlinux's symbol table gives, same-name
    statics included; on arm64 through .BTF.addrs, whose 64-bit addresses
    no 32-bit relocation could hold."""
    btf = vmlinux_btf(tree)
    [percpu] = [t for _, t in btf.own() if t.kind is Kind.DATASEC]
    assert percpu.name == '.data..percpu'
    placed = Counter((btf[v.type].name, v.offset) for v in percpu.items)
    assert placed == percpu_symbols(tree.build / 'vmlinux')
    assert len(placed) >= 10


@pytest.mark.kernel
def test_modules_have_valid_split_btf(tree):
    vmlinux = tree.build / 'vmlinux'
    kos = tree.modules()
    assert len(kos) == 3             # the configs' three =m options
    for ko in kos:
        assert objbtf('check', '--base', vmlinux, ko).returncode == 0
        run(need('bpftool'), 'btf', 'dump', '-B', vmlinux, 'file', ko)
        secs = sections(ko)
        # Nothing of the per-object BTF stays (the emptied sections may).
        assert [n for n in ('.rela.BTF', '.BTF.objbtf', '.BTF.addrs', '.rela.BTF.addrs')
                if secs.get(n, (b'',))[0]] == [], ko


@pytest.mark.kernel
def test_rebuild_after_touching_a_file_gives_the_same_btf(tree):
    clean = sections(tree.build / 'vmlinux')['.BTF'][0]
    clean_kos = {ko: sections(ko)['.BTF'][0] for ko in tree.modules()}
    vmlinux_mtime = (tree.build / 'vmlinux').stat().st_mtime_ns
    with touched(tree.src / 'kernel/fork.c'):
        verbose = tree.make('V=1', 'vmlinux', 'modules')
    assert (tree.build / 'vmlinux').stat().st_mtime_ns > vmlinux_mtime
    assert re.search(r'^objbtf link: .*\(replayed from the cache\)', verbose, re.M)
    assert sections(tree.build / 'vmlinux')['.BTF'][0] == clean
    assert {ko: sections(ko)['.BTF'][0] for ko in tree.modules()} == clean_kos


@pytest.mark.kernel
@pytest.mark.parametrize('build', ['kbuild_6_1_llvm', 'kbuild_6_12_llvm'])
def test_clang_objects_and_vmlinux(request, build):
    """clang compiled and ld.lld linked: the objects carry .rela.BTF (x86_64),
    and the type tags clang writes (btf_type_tag, e.g. __user) reach vmlinux."""
    tree = request.getfixturevalue(build)
    fork = section_names(tree.build / 'kernel/fork.o')
    assert 'clang' in fork['.comment'].decode() and '.rela.BTF' in fork
    tags = {t.name for _, t in vmlinux_btf(tree).own() if t.kind is Kind.TYPE_TAG}
    assert 'user' in tags


@pytest.mark.kernel
def test_arm64_objects_and_the_btf_link(kbuild_6_1_arm64):
    """arm64: addresses in .BTF.addrs, none in .rela.BTF; the temporary link
    collects the tables, and vmlinux keeps none of them.  With kallsyms the
    BTF link is the first kallsyms link: no .tmp_vmlinux.btf, one link of
    vmlinux fewer, and kallsyms's own check of its links passed."""
    tree = kbuild_6_1_arm64
    fork = section_names(tree.build / 'kernel/fork.o')
    assert '.BTF.addrs' in fork and '.rela.BTF.addrs' in fork and '.rela.BTF' not in fork
    assert tree.tmp_vmlinux.name == '.tmp_vmlinux.kallsyms1'
    assert not (tree.build / '.tmp_vmlinux.btf').exists()
    assert 'kallsyms_names' in (tree.build / 'System.map').read_text()
    tmp = sections(tree.tmp_vmlinux)
    assert tmp['.BTF.addrs'][0] and not tmp['.BTF.addrs'][1] & 2     # not loaded
    vmlinux = sections(tree.build / 'vmlinux')
    assert not [n for n in vmlinux if 'BTF' in n and n not in ('.BTF', '.BTF_ids')]
    with ElfFile.open(str(tree.build / 'vmlinux')) as elf:
        assert elf.section_by_name('.data..percpu').addr > 0xffffffff


@pytest.mark.kernel
def test_a_failed_btf_link_stops_with_lds_error(kbuild_6_1_arm64):
    """When ld fails on the BTF link (here the first kallsyms link), the
    build stops with ld's message, and objbtf is not run on a file that does
    not exist (it was, before)."""
    tree = kbuild_6_1_arm64
    r = subprocess.run(['make', '-C', tree.src, f'O={tree.build}', f'OBJBTF={objbtf_command()}',
                        *tree.make_args, 'LDFLAGS_vmlinux=--no-such-ld-option', 'vmlinux'],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert r.returncode != 0
    assert "unrecognized option '--no-such-ld-option'" in r.stderr
    assert 'Failed to generate BTF for vmlinux' in r.stderr
    assert 'objbtf' not in r.stderr and 'does not exist' not in r.stderr
    tree.make('vmlinux')        # as it was, for whatever test comes next


# --- i386: 4-byte pointers ----------------------------------------------------

@pytest.mark.kernel
def test_i386_btf_follows_the_rules_of_a_32_bit_kernel(kbuild_6_1_i386, tmp_path):
    """i386's BTF, checked as a 32-bit kernel checks it (objbtf check takes
    the pointer size from the ELF class) and read by bpftool; the x86_64
    kernel here would take its pointers as 8 bytes and refuse a struct
    that ends in one, which the same check with 8-byte pointers shows.
    The objects' relocations are REL (R_386_32, the addend in place)."""
    tree = kbuild_6_1_i386
    vmlinux = tree.build / 'vmlinux'
    with ElfFile.open(str(vmlinux)) as elf:
        assert elf.elf_class == 32
    assert objbtf('check', vmlinux).returncode == 0
    run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    raw = sections(vmlinux)['.BTF'][0]
    assert validate_bytes(raw, ptr_size=4) == []
    wide = validate_bytes(raw, ptr_size=8)
    assert wide and 'runs past the struct size' in wide[0].message
    fork = section_names(tree.build / 'kernel/fork.o')
    assert '.rel.BTF' in fork and '.rela.BTF' not in fork


# --- s390x: big-endian; in the full matrix (kernel_matrix.py) ------------------

@pytest.mark.kernel
def test_s390x_kernel_btf_is_big_endian_and_complete(kbuild_6_1_s390x, kernel_loader, tmp_path):
    """vmlinux's BTF in s390x's byte order, as pahole writes it from the same
    vmlinux, with the same content but what the link documents; objbtf check
    and bpftool read it; every percpu variable at its symbol; the modules'
    split BTF valid.  The x86_64 kernel here reads BTF in its own byte
    order only, so it checks the same types converted to little-endian."""
    tree = kbuild_6_1_s390x
    vmlinux = tree.build / 'vmlinux'
    raw = sections(vmlinux)['.BTF'][0]
    assert raw[:2] == b'\xeb\x9f'                                     # big-endian magic
    assert objbtf('check', vmlinux).returncode == 0
    run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    out = tmp_path / 'pahole.btf'
    run(need('pahole'), '-J', '--btf_gen_floats', '--btf_encode_detached', out, vmlinux)
    assert out.read_bytes()[:2] == b'\xeb\x9f'
    btf = parse_btf(raw)
    percpu_vars = {name for name, _ in percpu_symbols(vmlinux)}
    assert unexplained(parse_btf(out.read_bytes()), btf, percpu_vars,
                       vmlinux_members(tree.build)) == []
    [percpu] = [t for _, t in btf.own() if t.kind is Kind.DATASEC]
    assert Counter((btf[v.type].name, v.offset) for v in percpu.items) == \
        percpu_symbols(vmlinux)
    verdict = kernel_loader(encode_btf(btf, byteorder='little'))
    assert verdict.ok, verdict.log[-2000:]
    for ko in tree.modules():
        assert objbtf('check', '--base', vmlinux, ko).returncode == 0
        run(need('bpftool'), 'btf', 'dump', '-B', vmlinux, 'file', ko)


# --- CONFIG_LTO_CLANG: a real build; in the full matrix (kernel_matrix.py) ------

@pytest.mark.kernel
def test_an_lto_build_makes_its_btf_with_pahole_and_says_so(kbuild_6_1_lto, kernel_loader,
                                                             tmp_path):
    """ThinLTO's objects are LLVM bitcode: a build given OBJBTF says once
    that it ignores it, encodes no object, and makes the BTF of vmlinux and
    of the modules with pahole (the stock steps), which the kernel accepts."""
    tree = kbuild_6_1_lto
    said = [line for line in tree.stderr.splitlines() if 'objbtf: CONFIG_LTO_CLANG' in line]
    assert len(said) == 1, tree.stderr[-3000:]
    assert (tree.build / 'kernel/fork.o').read_bytes()[:4] == b'BC\xc0\xde'   # bitcode
    assert not [n for n in sections(tree.tmp_vmlinux) if n.startswith('.BTF.')]
    vmlinux = tree.build / 'vmlinux'
    raw = sections(vmlinux)['.BTF'][0]
    assert objbtf('check', vmlinux).returncode == 0
    verdict = kernel_loader(raw)
    assert verdict.ok, verdict.log[-2000:]
    out = tmp_path / 'pahole.btf'
    run(need('pahole'), '-J', '--btf_gen_floats', '--lang_exclude=rust',
        '--btf_encode_detached', out, vmlinux)
    assert kind_counts(parse_btf(raw)) == kind_counts(parse_btf(out.read_bytes()))
    kos = tree.modules()
    assert len(kos) == 3
    for ko in kos:
        assert objbtf('check', '--base', vmlinux, ko).returncode == 0
        run(need('bpftool'), 'btf', 'dump', '-B', vmlinux, 'file', ko)
        assert not [n for n in sections(ko) if n.startswith('.BTF.') or n == '.rela.BTF']


# --- CONFIG_LTO_CLANG: the patched Makefile.lib, without a build ------------

#: Includes the patched Makefile.lib as Makefile.build does, for one object.
LTO_PROBE = '''obj-y := fork.o
include $(srctree)/scripts/Kbuild.include
include $(srctree)/scripts/Makefile.lib
# (7.2 makes real-obj-y in Makefile.build, which this probe stands for)
real-obj-y ?= $(obj)/fork.o
$(obj)/fork.o: FORCE
\t@echo "make=[$(OBJBTF)] env=[$$OBJBTF] cmd=[$(cmd_objbtf)]"
FORCE:
'''


@pytest.mark.parametrize('lto', ['y', ''])
@pytest.mark.parametrize('version', VERSIONS)
def test_lto_builds_fall_back_to_pahole_and_say_so(tmp_path, version, lto):
    """With CONFIG_LTO_CLANG (bitcode objects) OBJBTF is cleared for every
    make that includes Makefile.lib (compiles, link-vmlinux.sh's environment,
    Makefile.modfinal), and the top directory's make says why, once."""
    files = sorted({*patched_files(version), *layout_files(version), 'scripts/Kbuild.include'})
    src = kernel_source(tmp_path / 'linux', version, files)
    assert apply(src).returncode == 0
    probe = tmp_path / 'probe.mk'
    probe.write_text(LTO_PROBE)

    def make_probe(obj: str, *extra: str) -> subprocess.CompletedProcess:
        # (OBJBTF_COMMAND as the top make would hand it down: no objbtf is asked)
        return run(need('make'), '-s', '-f', probe, f'srctree={src}', f'obj={obj}', *extra,
                   'CONFIG_DEBUG_INFO_BTF=y', f'CONFIG_LTO_CLANG={lto}', 'OBJBTF=objbtf',
                   f'{obj}/fork.o', env={**os.environ, 'OBJBTF_COMMAND': 'objbtf'})

    top, kernel = make_probe('.', 'need-builtin=1'), make_probe('kernel')
    if lto:
        assert top.stdout == kernel.stdout == 'make=[] env=[] cmd=[]\n'
        assert re.fullmatch(r'\S+/scripts/Makefile.lib:\d+: objbtf: CONFIG_LTO_CLANG: the '
                            r'objects are LLVM bitcode, .* makes its BTF with pahole\n', top.stderr)
        assert kernel.stderr == ''
    else:
        assert kernel.stdout == 'make=[objbtf] env=[objbtf] cmd=[ ; objbtf encode -q  kernel/fork.o]\n'
        assert top.stderr == kernel.stderr == ''
