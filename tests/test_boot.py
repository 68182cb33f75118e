"""Each bootable build of the kernel matrix booted in QEMU: the running
kernel, not only objbtf's and bpftool's readers, accepts the BTF objbtf
linked into vmlinux and its modules, and libbpf-based tools work with it.

From inside the guest (qemu_boot.INIT): /sys/kernel/btf/vmlinux is the BTF
of the vmlinux booted, bpftool reads it, every module loads and has its
/sys/kernel/btf/MODULE, an fentry program with a CO-RE relocation loads,
attaches and sees a fork, and the kernel logs no BTF error.
"""
from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, need, run
from kbuild_tree import sections
from kernel_matrix import MATRIX
from qemu_boot import INIT, boot, with_libraries, write_initramfs

BOOTABLE = [b.fixture for b in MATRIX if b.bootable]
#: Kernel log lines that say BTF was refused: the verifier's log of a
#: rejected BTF ("BPF: ..." lines, then "BPF: Invalid ...") and the module
#: loader's "failed to validate module [NAME] BTF".
BTF_ERROR = re.compile(r'\bBPF:|failed to validate module|\bBTF\b.*(?:error|fail|invalid)', re.I)


def module_name(ko: Path) -> str:
    return ko.stem.replace('-', '_')


@pytest.fixture(scope='module')
def guest_tools(tmp_path_factory) -> dict[str, Path]:
    """The guest's programs: busybox, bpftool, the loader and the BPF object,
    with the libraries they load."""
    out = tmp_path_factory.mktemp('guest')
    need('clang')
    need('qemu-system-x86_64')
    busybox = Path('/bin/busybox')
    linked = run('ldd', busybox, check=False) if busybox.exists() else None
    if linked is None or 'not a dynamic executable' not in linked.stdout + linked.stderr:
        pytest.fail('a static busybox is not installed (Debian package busybox-static)')
    obj, loader = out / 'core_fentry.bpf.o', out / 'loader'
    run('clang', '-target', 'bpf', '-O2', '-g', '-c', FIXTURES / 'boot' / 'core_fentry.bpf.c',
        '-o', obj)
    r = run('gcc', '-O2', '-Wall', '-o', loader, FIXTURES / 'boot' / 'loader.c', '-lbpf',
            check=False)
    if r.returncode:
        pytest.fail(f'the boot test loader does not build (Debian package libbpf-dev): {r.stderr}')
    files = {'/bin/busybox': busybox, '/core_fentry.bpf.o': obj}
    files.update(with_libraries(Path(need('bpftool'))))
    files.update({('/bin/loader' if k == str(loader) else k): v
                  for k, v in with_libraries(loader).items()})
    files['/bin/bpftool'] = files.pop(need('bpftool'))
    return files


@pytest.mark.parametrize('build', BOOTABLE)
def test_the_booted_kernel_uses_objbtf_s_btf(build, request, guest_tools, tmp_path):
    tree = request.getfixturevalue(build)
    vmlinux = tree.build / 'vmlinux'
    modules = tree.modules()
    files = dict(guest_tools)
    files['/init'] = INIT.encode()
    files.update({f'/modules/{ko.name}': ko for ko in modules})
    guest = boot(vmlinux, write_initramfs(tmp_path / 'initramfs.cpio', files))
    console = guest.console[-6000:]

    assert guest.said('release'), f'the guest did not run its checks:\n{console}'
    btf = sections(vmlinux)['.BTF'][0]
    assert guest.said('vmlinux-btf') == [hashlib.md5(btf).hexdigest()], console
    assert guest.said('bpftool-types') and int(guest.said('bpftool-types')[0]) > 1000, console
    assert guest.said('module-failed') == [], console
    assert sorted(guest.said('module-btf')) == sorted(module_name(ko) for ko in modules), console
    assert guest.said('loader-exit') == ['0'], console
    seen = guest.said('fentry')
    assert len(seen) == 1 and re.fullmatch(r'child=(\d+) seen=\1 calls=[1-9]\d*', seen[0]), console
    errors = [line for line in guest.kernel_log() if BTF_ERROR.search(line)]
    assert errors == [], console


#: (the build an out-of-tree module is built against, another build of the
#: same version: the DWARF-less one, one more config option and other BTF ids).
OTHER_BUILDS = [('kbuild_7_2', 'kbuild_7_2_gbtf'), ('kbuild_6_12', 'kbuild_6_12_gbtf')]


def built_kmod(tree, where: Path, *make_args: str) -> Path:
    """tests/fixtures/kmod-kfuncs built with make M= against ``tree``."""
    src = where / 'kmod-kfuncs'
    shutil.copytree(FIXTURES / 'kmod-kfuncs', src)
    tree.make(f'M={src}', *make_args, 'modules')
    return src / 'objbtf_kfuncs.ko'


def boot_with(other, ko: Path, guest_tools, where: Path):
    files = {**guest_tools, '/init': INIT.encode(), f'/modules/{ko.name}': ko}
    return boot(other.build / 'vmlinux', write_initramfs(where / 'initramfs.cpio', files))


@pytest.mark.parametrize('home,elsewhere', OTHER_BUILDS)
def test_an_out_of_tree_module_keeps_its_btf_on_another_build(home, elsewhere, request,
                                                               guest_tools, tmp_path):
    """An out-of-tree module (tests/fixtures/kmod-kfuncs) built with make M=
    against one tree gets a distilled base (.BTF.base: on 7.2 the stock
    flow's resolve_btfids --distill_base, after objbtf's link; on 6.12
    objbtf's link, linkdedup/distill.py), so the kernel of another build of
    the same version relocates its BTF onto its own: the DWARF-less build's,
    with one more config option and other BTF ids.  On 6.12 the same module
    linked without distilled_base (OBJBTF_FLAGS' own list, docs/kbuild.md)
    has split BTF on its build's vmlinux, which that kernel cannot take: the
    test would see it."""
    tree, other = request.getfixturevalue(home), request.getfixturevalue(elsewhere)
    (tmp_path / 'distilled').mkdir()
    ko = built_kmod(tree, tmp_path / 'distilled')
    assert '.BTF.base' in sections(ko)
    assert 'CONFIG_OBJBTF_GBTF=y' in other.config() and \
        'CONFIG_OBJBTF_GBTF=y' not in tree.config()
    btf = [sections(t.build / 'vmlinux')['.BTF'][0] for t in (tree, other)]
    assert btf[0] != btf[1]
    guest = boot_with(other, ko, guest_tools, tmp_path / 'distilled')
    console = guest.console[-6000:]
    assert guest.said('module-failed') == [], console
    assert guest.said('module-btf') == [module_name(ko)], console
    assert [line for line in guest.kernel_log() if BTF_ERROR.search(line)] == [], console
    if tree.version == '7.2':
        return
    (tmp_path / 'plain').mkdir()
    plain = built_kmod(tree, tmp_path / 'plain', 'OBJBTF_FLAGS=--btf-features default')
    assert '.BTF.base' not in sections(plain)
    guest = boot_with(other, plain, guest_tools, tmp_path / 'plain')
    console = guest.console[-6000:]
    assert guest.said('release'), console
    refused = [line for line in guest.kernel_log() if BTF_ERROR.search(line)]
    assert guest.said('module-btf') != [module_name(plain)] or refused, console
