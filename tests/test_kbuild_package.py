"""``make bindeb-pkg`` with objbtf: the Debian packages of a built tree carry
the BTF objbtf made, in the kernel image and in every module.

It runs on the 7.2 DWARF-less build (kernel_matrix.py), the mode a
distribution would package: its make arguments (``OBJBTF``,
``OBJBTF_GBTF=1``) must reach the makes that ``debian/rules`` runs inside
``dpkg-buildpackage``.  Were they lost there, Kbuild would see other command
lines, rebuild the objects and vmlinux with the stock flow, and the packages
would carry another BTF than the tree had before: the test compares with
the bytes read before packaging.  ``KDEB_PKGVERSION`` gives the packages
the tree's build number (``KBUILD_BUILD_VERSION``, 1 in the tests), so that
packaging relinks nothing and the build's other tests see the same tree.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import need, run
from kbuild_tree import KernelBuild, sections

pytestmark = [pytest.mark.kernel, pytest.mark.dwarfless]

#: The tools bindeb-pkg runs (Debian packages dpkg-dev, debhelper, fakeroot).
PACKAGING = ('dpkg-buildpackage', 'dh_testdir', 'dpkg-deb', 'fakeroot')


def btf_of(path: Path) -> bytes:
    found = sections(path).get('.BTF')
    assert found is not None, f'{path}: no .BTF section'
    return found[0]


def unpacked(deb: Path, into: Path) -> Path:
    run('dpkg-deb', '-x', deb, into)
    return into


def test_bindeb_pkg_packages_carry_objbtf_s_btf(kbuild_7_2_gbtf: KernelBuild, tmp_path):
    for tool in PACKAGING:
        need(tool)
    tree = kbuild_7_2_gbtf
    release = (tree.build / 'include/config/kernel.release').read_text().strip()
    vmlinux_before = btf_of(tree.build / 'vmlinux')
    modules_before = {ko.relative_to(tree.build): btf_of(ko) for ko in tree.modules()}
    assert modules_before, 'the build has no modules to package'

    out = tree.build.parent                    # dpkg-buildpackage writes to O='s parent
    for old in out.glob('*.deb'):
        old.unlink()
    tree.make('bindeb-pkg', f'KDEB_PKGVERSION={release}-1')
    debs = {p.name.split('_')[0]: p for p in out.glob('*.deb')}
    image = debs.pop(f'linux-image-{release}', None)
    assert image is not None, f'no linux-image-{release} package among {sorted(debs)}'

    root = unpacked(image, tmp_path / 'image')
    extracted = tmp_path / 'vmlinux'
    with open(extracted, 'wb') as f:
        subprocess.run([tree.src / 'scripts/extract-vmlinux', root / f'boot/vmlinuz-{release}'],
                       stdout=f, check=True)
    assert btf_of(extracted) == vmlinux_before, 'the packaged kernel has another BTF than the tree'
    assert btf_of(tree.build / 'vmlinux') == vmlinux_before, 'packaging relinked vmlinux'

    kernel_dir = root / f'lib/modules/{release}/kernel'
    packaged = {ko.relative_to(kernel_dir): ko for ko in kernel_dir.rglob('*.ko')}
    assert sorted(packaged) == sorted(modules_before)
    differ = [str(name) for name, ko in packaged.items() if btf_of(ko) != modules_before[name]]
    assert differ == [], f'packaged modules with another BTF than the tree: {differ[:10]}'
