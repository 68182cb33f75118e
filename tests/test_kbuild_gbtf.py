"""The DWARF-less BTF build (kbuild-integration patch 4) on a real Linux 6.1:
a fresh copy of the source, patched, configured as the reference kernel
with the switch, built once per run with ``make OBJBTF=objbtf OBJBTF_GBTF=1
vmlinux modules`` (conftest's kbuild_6_1_gbtf); its BTF checked by objbtf, bpftool and the running kernel, and
against the DWARF path's BTF of the same configuration (the reference
build's objects encoded and linked: ``encoded_kernel``), each difference
derived from that build's DWARF."""
from __future__ import annotations

import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from btf_shapes import lost_enumerators
from conftest import need, objbtf, run
from gcc_btf_facts import dwarf_facts, dwarf_only_drops, function_symbols, summed, unexplained
from kbuild_tree import assert_valid_split_btf, sections
from kernel_tree import TMP_VMLINUX
from objbtf.btf import Btf, parse_btf
from objbtf.elf.reader import ElfFile

pytestmark = [pytest.mark.kernel, pytest.mark.dwarfless]


@pytest.fixture(scope='module')
def gbtf_build(kbuild_6_1_gbtf) -> tuple[Path, Path]:
    """(source, build) of the DWARF-less build (conftest, kbuild_tree.py)."""
    return kbuild_6_1_gbtf.src, kbuild_6_1_gbtf.build


@pytest.fixture(scope='module')
def gbtf_modules(kbuild_6_1_gbtf) -> list[Path]:
    return kbuild_6_1_gbtf.modules()


def vmlinux_btf(build: Path) -> Btf:
    return parse_btf(sections(build / 'vmlinux')['.BTF'][0])


@pytest.fixture(scope='module')
def dwarf_btf(encoded_kernel, tmp_path_factory) -> Btf:
    """The DWARF path's final BTF of the reference configuration."""
    out = tmp_path_factory.mktemp('dwarf-link') / 'vmlinux.btf'
    objbtf('link', '-q', '--output', out, encoded_kernel / TMP_VMLINUX, cwd=encoded_kernel)
    return parse_btf(out.read_bytes())


def test_configured_without_dwarf(gbtf_build):
    _, build = gbtf_build
    config = (build / '.config').read_text()
    for line in ('CONFIG_OBJBTF_GBTF=y', 'CONFIG_DEBUG_INFO_NONE=y', 'CONFIG_DEBUG_INFO_BTF=y',
                 'CONFIG_DEBUG_INFO_BTF_MODULES=y'):
        assert f'\n{line}\n' in config, line
    assert '\nCONFIG_DEBUG_INFO=y\n' not in config
    saved = (build / 'kernel/.fork.o.cmd').read_text().split('\n', 1)[0]
    assert ' -gbtf ' in f'{saved} ' and not re.search(r' -g(dwarf\S*)? ', saved)


def test_no_dwarf_anywhere(gbtf_build, gbtf_modules):
    """No object, module or vmlinux carries DWARF debug information (GCC
    still writes the call frame information, .debug_frame, under -gbtf);
    every object of vmlinux and the modules carries objbtf's chunk, the vDSO
    no BTF."""
    _, build = gbtf_build
    members = [build / m for m in run('ar', 't', build / 'vmlinux.a').stdout.split()]
    mod_objects = [build / o for ko in gbtf_modules
                   for o in ko.with_suffix('.mod').read_text().split()]
    with_dwarf, typed, chunked = [], 0, 0
    for path in [*members, *mod_objects, build / 'vmlinux', *gbtf_modules]:
        with ElfFile.open(str(path)) as elf:
            names = {s.name for s in elf.sections}
        if any(n.startswith('.debug_') and n != '.debug_frame' for n in names):
            with_dwarf.append(path)
        typed += '.BTF' in names
        chunked += '.BTF.objbtf' in names
    assert with_dwarf == []
    assert chunked >= len(members) + len(mod_objects) and typed > 0.9 * len(members)
    assert '.BTF' not in sections(build / 'arch/x86/entry/vdso/vdso64.so')


def test_no_second_copy_of_the_objects_btf(gbtf_build):
    """The DWARF-less build removes .tmp_vmlinux.btf once vmlinux's BTF is
    linked (nothing reads it again; the build with DWARF keeps it, as stock
    does: test_kbuild reads it)."""
    _, build = gbtf_build
    assert (build / '.btf.vmlinux.bin.o').exists() and (build / 'vmlinux').exists()
    assert not (build / '.tmp_vmlinux.btf').exists()


def test_vmlinux_btf_is_valid(gbtf_build, kernel_loader):
    _, build = gbtf_build
    vmlinux = build / 'vmlinux'
    assert objbtf('check', vmlinux).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    assert dump.stdout.count('\n') > 40000
    kernel = objbtf('check', '--kernel', vmlinux, check=False)
    assert kernel.returncode == 0, kernel.stdout + kernel.stderr


def test_modules_have_valid_split_btf(gbtf_build, gbtf_modules):
    _, build = gbtf_build
    vmlinux = build / 'vmlinux'
    assert len(gbtf_modules) == 3
    for ko in gbtf_modules:
        assert_valid_split_btf(vmlinux, ko)


# --- against the DWARF path --------------------------------------------------

@pytest.fixture(scope='module')
def reference_facts(kernel_build) -> dict[str, Counter]:
    """gcc_btf_facts.dwarf_facts summed over the reference build's vmlinux objects."""
    members = [str(kernel_build / m)
               for m in run('ar', 't', kernel_build / 'vmlinux.a').stdout.split()]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return summed(pool.map(dwarf_facts, members, chunksize=16))


def test_same_btf_as_the_dwarf_path(gbtf_build, dwarf_btf, reference_facts, encoded_kernel):
    """The DWARF-less vmlinux has the DWARF path's types but for what GCC 12's
    BTF lacks or adds (gcc_btf_facts), each derived from the DWARF build;
    the fixtures' enums show the enumerator loss is there to derive."""
    _, build = gbtf_build
    ours = vmlinux_btf(build)
    assert lost_enumerators(dwarf_btf) and not lost_enumerators(ours)
    problems = unexplained(ours, dwarf_btf, reference_facts, function_symbols(build / 'vmlinux'),
                           dwarf_only_drops(encoded_kernel / TMP_VMLINUX))
    assert problems == []
