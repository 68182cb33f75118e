"""The Kbuild integration (kbuild-integration/) on a real Linux 6.1 build.

The quick tests apply the patches to a copy of the files they change. The
kernel tests build a fresh, patched copy of the source with the reference
configuration and ``make OBJBTF=objbtf vmlinux modules`` once per session
(about 20 minutes on 2 cores), then check what the build made.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import KERNEL_DIR, ROOT, need, objbtf, run
from objbtf.btf import Kind, parse_btf

INTEGRATION = ROOT / 'kbuild-integration'
TARBALL = Path('/usr/src/linux-source-6.1.tar.xz')
PATCHED = ['scripts/Makefile.build', 'scripts/Makefile.lib', 'scripts/mod/modpost.c',
           'scripts/Makefile.vmlinux', 'scripts/Makefile.modfinal', 'scripts/link-vmlinux.sh',
           'include/asm-generic/vmlinux.lds.h']


def kernel_source(dest: Path, files: list[str] | None = None) -> Path:
    """Pristine Linux 6.1 source (only ``files`` if given) in ``dest``: copied
    from the shared pristine tree, or extracted from Debian's tarball."""
    pristine = KERNEL_DIR / 'linux'
    if pristine.is_dir() and files is None:
        shutil.copytree(pristine, dest, symlinks=True)
        return dest
    if pristine.is_dir():
        for f in files:
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pristine / f, dest / f)
        return dest
    if not TARBALL.exists():
        pytest.fail(f'{TARBALL} is missing (Debian package linux-source-6.1)')
    dest.mkdir(parents=True)
    run('tar', '-xf', TARBALL, '-C', dest, '--strip-components=1',
        *[f'linux-source-6.1/{f}' for f in files or []])
    return dest


def apply(tree: Path) -> subprocess.CompletedProcess:
    need('patch')
    return run(INTEGRATION / 'apply', tree, check=False)


def digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob('*')) if p.is_file()}


# --- apply, on the files it patches ------------------------------------------

def test_apply_is_idempotent(tmp_path):
    tree = kernel_source(tmp_path / 'linux', PATCHED)
    before = digest(tree)
    first = apply(tree)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count('applied: ') == 3 and 'already' not in first.stdout
    patched = digest(tree)
    assert set(patched) == set(before) | {'scripts/btf-objects.lds'}
    assert all(patched[f] != before[f] for f in PATCHED)
    assert '$(cmd_objbtf)' in (tree / 'scripts/Makefile.build').read_text()

    second = apply(tree)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count('already applied: ') == 3
    assert digest(tree) == patched


@pytest.mark.parametrize('damage', ['missing file', 'mainline layout', 'edited context'])
def test_apply_refuses_an_unknown_tree(tmp_path, damage):
    tree = kernel_source(tmp_path / 'linux', PATCHED)
    if damage == 'missing file':
        (tree / 'scripts/Makefile.modfinal').unlink()
    elif damage == 'mainline layout':     # cmd_cc_o_c moved to Makefile.lib
        build = tree / 'scripts/Makefile.build'
        build.write_text(build.read_text().replace('cmd_cc_o_c = ', 'cmd_cc_o_x = '))
    else:
        script = tree / 'scripts/link-vmlinux.sh'
        script.write_text(script.read_text().replace('local pahole_ver\n', 'local ver\n'))
    before = digest(tree)
    result = apply(tree)
    assert result.returncode != 0
    expected = 'does not apply' if damage == 'edited context' else 'is not a Linux 6.1 tree'
    assert expected in result.stderr
    assert digest(tree) == before


def test_apply_refuses_a_directory_that_is_no_kernel(tmp_path):
    result = apply(tmp_path)
    assert result.returncode != 0 and 'is not a Linux 6.1 tree' in result.stderr


# --- a real build -------------------------------------------------------------

def objbtf_command() -> str:
    """$OBJBTF, else the installed objbtf called directly (no pyenv shim)."""
    beside = Path(sys.executable).with_name('objbtf')
    path = os.environ.get('OBJBTF') or (str(beside) if beside.exists() else shutil.which('objbtf'))
    if path is None:
        pytest.fail('objbtf is not installed: run scripts/install.sh')
    return path


def make(src: Path, build: Path, *targets: str) -> str:
    """make OBJBTF=... TARGETS in the O= tree; fails on a BTF-related warning.
    Returns what make wrote to stderr."""
    r = subprocess.run(['make', '-C', str(src), f'O={build}', f'-j{os.cpu_count() or 2}',
                        f'OBJBTF={objbtf_command()}', *targets],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    warnings = [line for line in r.stderr.splitlines() if 'warning' in line.lower() and 'BTF' in line]
    assert warnings == []
    return r.stderr


def sections(path: Path) -> dict[str, tuple[bytes, int]]:
    """Section name -> (contents, flags), failing on a repeated name."""
    with open(path, 'rb') as f:
        elf = ELFFile(f)
        names = [s.name for s in elf.iter_sections()]
        assert len(names) == len(set(names)), f'{path}: repeated section names'
        return {s.name: (s.data(), s['sh_flags']) for s in elf.iter_sections()}


def blob_length(data: bytes) -> int:
    """Length of the BTF blob at the start of ``data``, from its header."""
    magic, _, _, hdr_len = struct.unpack_from('<HBBI', data)
    assert magic == 0xEB9F
    _, _, str_off, str_len = struct.unpack_from('<IIII', data, 8)
    return hdr_len + str_off + str_len


def kind_counts(btf) -> Counter:
    return Counter(t.kind.name for _, t in btf.own())


@pytest.fixture(scope='module')
def kbuild(tmp_path_factory):
    """(source, build) of Linux 6.1 patched and built with OBJBTF, once."""
    for tool in ('make', 'gcc', 'pahole', 'bpftool'):
        need(tool)
    top = tmp_path_factory.mktemp('kbuild')
    src, build = kernel_source(top / 'linux'), top / 'build'
    result = apply(src)
    assert result.returncode == 0, result.stderr
    run(INTEGRATION / 'configure', src, build)
    (top / 'make.stderr').write_text(make(src, build, 'vmlinux', 'modules'))
    return src, build


@pytest.fixture(scope='module')
def modules(kbuild):
    _, build = kbuild
    kos = [build / line for line in (build / 'modules.order').read_text().split()]
    assert len(kos) == 3 and all(ko.suffix == '.ko' for ko in kos)
    return kos


@pytest.mark.kernel
def test_objects_carry_btf_and_other_elf_files_do_not(kbuild):
    _, build = kbuild
    fork = sections(build / 'kernel/fork.o')
    assert '.BTF' in fork and '.rela.BTF' in fork
    # The vDSO image is an ELF file mapped into every process: no BTF there.
    assert '.BTF' not in sections(build / 'arch/x86/entry/vdso/vdso64.so')


@pytest.mark.kernel
def test_links_check_their_objects_and_are_quiet(kbuild, modules):
    """vmlinux's and each module's objbtf link get the list of their objects
    (vmlinux.a, the .mod file), and so fail on one built without objbtf;
    they print no summary without V=1."""
    src, build = kbuild
    assert 'objbtf link' not in (build.parent / 'make.stderr').read_text()
    assert '--objects vmlinux.a' in (src / 'scripts/link-vmlinux.sh').read_text()
    for ko in modules:
        saved = (ko.parent / f'.{ko.name}.cmd').read_text()
        assert f'--objects {ko.relative_to(build).with_suffix(".mod")}' in saved


@pytest.mark.kernel
def test_btf_link_reads_relocated_objects_without_dwarf(kbuild):
    _, build = kbuild
    tmp = sections(build / '.tmp_vmlinux.btf')
    assert not any(name.startswith('.debug_') for name in tmp)
    data, flags = tmp['.BTF.objects']
    assert not flags & 2                                   # SHF_ALLOC
    assert blob_length(data) < len(data)                   # many blobs
    assert '.BTF' not in tmp or not tmp['.BTF'][0]


@pytest.mark.kernel
def test_vmlinux_has_exactly_one_btf_blob(kbuild):
    _, build = kbuild
    vmlinux = sections(build / 'vmlinux')
    assert not [n for n in vmlinux if 'BTF' in n and n not in ('.BTF', '.BTF_ids')]
    data, flags = vmlinux['.BTF']
    assert flags & 2                                       # loaded
    assert blob_length(data) == len(data)
    assert data == sections(build / '.btf.vmlinux.bin.o')['.BTF'][0]


@pytest.mark.kernel
def test_vmlinux_btf_is_valid(kbuild, kernel_loader):
    _, build = kbuild
    vmlinux = build / 'vmlinux'
    assert objbtf('check', vmlinux).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    assert dump.stdout.count('\n') > 40000
    kernel = objbtf('check', '--kernel', vmlinux, check=False)
    assert kernel.returncode == 0, kernel.stdout + kernel.stderr


@pytest.mark.kernel
def test_vmlinux_btf_matches_pahole(kbuild, tmp_path):
    """pahole on the same tree's vmlinux: .tmp_vmlinux.btf has no DWARF now,
    and vmlinux holds the same objects' DWARF."""
    _, build = kbuild
    ours = parse_btf(sections(build / 'vmlinux')['.BTF'][0])
    out = tmp_path / 'pahole.btf'
    run(need('pahole'), '-J', '--btf_gen_floats', '--lang_exclude=rust',
        '--btf_encode_detached', out, build / 'vmlinux')
    theirs = parse_btf(out.read_bytes())
    skip = {'FUNC', 'FUNC_PROTO', 'VAR', 'DATASEC', 'DECL_TAG'}
    a, b = kind_counts(ours), kind_counts(theirs)
    differ = {k: (a[k], b[k]) for k in a | b if k not in skip and a[k] != b[k]}
    assert differ == {}, f'kind: (objbtf, pahole) {differ}'
    # pahole 1.24 tags no kfunc (README)
    kfunc_tags = sum(1 for _, t in ours.own() if t.kind is Kind.DECL_TAG and t.name == 'bpf_kfunc')
    assert kfunc_tags > 0 and a['DECL_TAG'] == b['DECL_TAG'] + kfunc_tags
    # pahole misses the percpu variables of .data..percpu..* (README).
    assert a['VAR'] >= b['VAR'] and a['DATASEC'] == b['DATASEC'] == 1


@pytest.mark.kernel
def test_modules_have_valid_split_btf(kbuild, modules):
    _, build = kbuild
    vmlinux = build / 'vmlinux'
    left = {}
    for ko in modules:
        assert objbtf('check', '--base', vmlinux, ko).returncode == 0
        run(need('bpftool'), 'btf', 'dump', '-B', vmlinux, 'file', ko)
        secs = sections(ko)
        assert blob_length(secs['.BTF'][0]) == len(secs['.BTF'][0]), ko
        left[ko.name] = sorted(n for n in ('.rela.BTF', '.BTF.objbtf') if secs.get(n, (b'',))[0])
    # Nothing of the per-object BTF stays in a module (it may keep the emptied sections).
    assert left == {ko.name: [] for ko in modules}


@pytest.mark.kernel
def test_rebuild_after_touching_a_file_gives_the_same_btf(kbuild, modules):
    src, build = kbuild
    clean = sections(build / 'vmlinux')['.BTF'][0]
    clean_kos = {ko: sections(ko)['.BTF'][0] for ko in modules}
    vmlinux_mtime = (build / 'vmlinux').stat().st_mtime_ns

    make(src, build, 'vmlinux', 'modules')      # nothing to do
    assert (build / 'vmlinux').stat().st_mtime_ns == vmlinux_mtime

    fork_mtime = (build / 'kernel/fork.o').stat().st_mtime_ns
    (src / 'kernel/fork.c').touch()
    verbose = make(src, build, 'V=1', 'vmlinux', 'modules')
    # With V=1, each link says what it did: vmlinux's, then every module's.
    summaries = re.findall(r'^objbtf link: \d+ objects.*$', verbose, re.MULTILINE)
    assert len(summaries) == 1 + len(modules)
    # No type changed: vmlinux's link replays .btf.vmlinux.cache, with the same result.
    assert sum('(replayed from the cache)' in line for line in summaries) == 1
    assert (build / 'kernel/fork.o').stat().st_mtime_ns > fork_mtime
    assert (build / 'vmlinux').stat().st_mtime_ns > vmlinux_mtime
    assert sections(build / 'vmlinux')['.BTF'][0] == clean
    assert {ko: sections(ko)['.BTF'][0] for ko in modules} == clean_kos


@pytest.mark.kernel
def test_link_flags_relink_and_compile_nothing(kbuild, modules):
    """OBJBTF_LINK_FLAGS reaches vmlinux's link and every module's: setting
    it relinks them (it is in their saved command lines) and compiles no
    object; -j 1 gives the same BTF as the default -j."""
    src, build = kbuild
    btf = sections(build / 'vmlinux')['.BTF'][0]
    kos = {ko: (sections(ko)['.BTF'][0], ko.stat().st_mtime_ns) for ko in modules}
    members = [build / m for m in run('ar', 't', build / 'vmlinux.a').stdout.split()]
    compiled = {m: m.stat().st_mtime_ns for m in members}
    vmlinux_mtime = (build / 'vmlinux').stat().st_mtime_ns

    make(src, build, 'OBJBTF_LINK_FLAGS=-j 1', 'vmlinux', 'modules')
    assert "OBJBTF_LINK_FLAGS='-j 1'" in (build / '.vmlinux.cmd').read_text()
    assert (build / 'vmlinux').stat().st_mtime_ns > vmlinux_mtime
    assert sections(build / 'vmlinux')['.BTF'][0] == btf
    for ko, (ko_btf, mtime) in kos.items():
        assert '-j 1' in (ko.parent / f'.{ko.name}.cmd').read_text()
        assert ko.stat().st_mtime_ns > mtime
        assert sections(ko)['.BTF'][0] == ko_btf
    assert {m: m.stat().st_mtime_ns for m in members} == compiled
