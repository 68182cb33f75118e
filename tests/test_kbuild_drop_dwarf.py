"""``make OBJBTF=objbtf OBJBTF_DROP_DWARF=1``: a DWARF build whose objects
lose their DWARF once objbtf has encoded it, with the BTF of the DWARF build.

On a copy of the reference tree (kbuild_7_2, built with DWARF): every object
Kbuild encoded is encoded again with --drop-dwarf, as its compile's post-step
would have, and one source is touched, so that make compiles it with the
variable on its command line, through the resident server, and links
vmlinux and the modules again.  The oracle is the tree's own BTF before the
change: vmlinux's and every module's must come out byte for byte the same.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import objbtf
from kbuild_tree import BUILD_GIB, KernelBuild, need_space, sections, touched, vmlinux_members

pytestmark = pytest.mark.kernel


def encoded_by_kbuild(obj: Path) -> bool:
    """Whether Kbuild's post-step encoded ``obj`` (it carries objbtf's chunk)."""
    return '.BTF.objbtf' in sections(obj)


def debug_info_size(path: Path) -> int:
    found = sections(path).get('.debug_info')
    return 0 if found is None else len(found[0])


def module_objects(tree: KernelBuild) -> list[Path]:
    return [tree.build / name for ko in tree.modules()
            for name in ko.with_suffix('.mod').read_text().split()]


def test_dropped_dwarf_build_has_the_dwarf_build_s_btf(kbuild_7_2: KernelBuild, tmp_path):
    need_space(tmp_path, 2 * BUILD_GIB, 'a copy of the reference build')
    copy = tmp_path / 'build'
    shutil.copytree(kbuild_7_2.build, copy, symlinks=True)
    tree = KernelBuild(kbuild_7_2.version, kbuild_7_2.src, copy, kbuild_7_2.make_args)
    vmlinux_btf = sections(copy / 'vmlinux')['.BTF'][0]
    modules_btf = {ko: sections(ko)['.BTF'][0] for ko in tree.modules()}
    objects = [o for o in [*vmlinux_members(copy), *module_objects(tree)] if encoded_by_kbuild(o)]
    objbtf('encode', '-q', '--drop-dwarf', *[o.relative_to(copy) for o in objects], cwd=copy)

    fork = copy / 'kernel/fork.o'
    with touched(tree.src / 'kernel/fork.c'):
        tree.make('vmlinux', 'modules', 'OBJBTF_DROP_DWARF=1')
    assert debug_info_size(fork) == 0, 'make OBJBTF_DROP_DWARF=1 left fork.o its DWARF'
    assert sections(copy / 'vmlinux')['.BTF'][0] == vmlinux_btf
    assert {ko: sections(ko)['.BTF'][0] for ko in tree.modules()} == modules_btf
    kept = [o.relative_to(copy) for o in objects if debug_info_size(o)]
    assert kept == []
    # What is left of vmlinux's DWARF comes from the objects Kbuild does not
    # encode (x86's boot code in vmlinux.a): none of the encoded ones' DWARF.
    assert debug_info_size(copy / 'vmlinux') < debug_info_size(kbuild_7_2.build / 'vmlinux')
