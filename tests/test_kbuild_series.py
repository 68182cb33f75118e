"""Each patch of the 7.2 series builds on its own, as a kernel maintainer
bisecting it would build it (full tier only: a build per patch).

One copy of Linux 7.2 takes the patches one at a time; after each, a build
from an empty O= directory (the reference config with the boot fragment,
as the matrix's 7.2 row) must succeed with ``OBJBTF`` set, without a
warning about BTF, and leave vmlinux with a ``.BTF`` section.  Before the
last patch the tree still asks Kconfig for the installed pahole, so the
earlier builds need it.  The builds compile through ccache and objbtf's encode
cache, shared by all of them, so that the objects the patches do not change
cost a cache hit after the first build.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need, run
from kbuild_tree import INTEGRATION, fragment_path, kernel_source, objbtf_command, sections
from kernel_matrix import BOOTABLE

pytestmark = [pytest.mark.kernel, pytest.mark.full_only]

VERSION = '7.2'


def build_with_patches(src: Path, build: Path, env: dict[str, str]) -> str:
    """A build from an empty O= directory: what went wrong, or ''."""
    shutil.rmtree(build, ignore_errors=True)
    ccache = ('CC=ccache gcc', 'HOSTCC=ccache gcc')
    run(INTEGRATION / 'configure', src, build, *map(fragment_path, BOOTABLE), *ccache, env=env)
    r = subprocess.run(['make', '-C', str(src), f'O={build}', f'-j{os.cpu_count() or 2}',
                        f'OBJBTF={objbtf_command()}', *ccache, 'vmlinux', 'modules', 'bzImage'],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = r.stderr.splitlines()
    if r.returncode != 0:
        errors = [line for line in lines if 'error' in line.lower()] or lines
        return 'make failed: ' + ' | '.join(errors[:4])
    warnings = [line for line in lines if 'warning' in line.lower() and 'BTF' in line]
    if warnings:
        return f'{len(warnings)} warnings: ' + ' | '.join(warnings[:3])
    if '.BTF' not in sections(build / 'vmlinux'):
        return 'vmlinux has no .BTF'
    return ''


def test_each_patch_of_the_7_2_series_builds_on_its_own(tmp_path):
    for tool in ('make', 'gcc', 'ccache', 'patch', 'pahole'):
        need(tool)
    patches = sorted((INTEGRATION / f'linux-{VERSION}').glob('*.patch'))
    assert len(patches) >= 2, patches
    src, build = kernel_source(tmp_path / 'linux', VERSION), tmp_path / 'build'
    env = dict(os.environ, CCACHE_DIR=str(tmp_path / 'ccache'),
               OBJBTF_CACHE_DIR=str(tmp_path / 'encode-cache'))
    failed = {}
    for patch in patches:
        run('patch', '-p1', '-s', '--no-backup-if-mismatch', '-d', src, '-i', patch)
        problem = build_with_patches(src, build, env)
        if problem:
            failed[patch.name] = problem
    assert not failed, '\n'.join(f'{name}: {why}' for name, why in failed.items())
