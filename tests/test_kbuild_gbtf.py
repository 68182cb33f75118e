"""The DWARF-less BTF build (kbuild-integration's dwarfless-gbtf patch) on
real Linux 6.1, 6.12 and 7.2: a fresh copy of the source, patched, configured as
the reference kernel with the switch, built once per run with ``make
OBJBTF=objbtf OBJBTF_GBTF=1 vmlinux modules`` (conftest's kbuild_*_gbtf);
its BTF checked by objbtf, bpftool and the running kernel, and against the
DWARF path's BTF of the same version and configuration (``DwarfPath``), each
difference derived from that build's DWARF."""
from __future__ import annotations

import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from btf_shapes import lost_enumerators
from conftest import need, objbtf, run
from gcc_btf_facts import dwarf_facts, dwarf_only_drops, summed, unexplained
from kbuild_tree import (REFERENCE_MODULES, KernelBuild, assert_the_running_kernel_accepts,
                         assert_valid_split_btf, sections, vdso_image, vmlinux_members)
from kernel_matrix import BY_FIXTURE
from objbtf.btf import Btf, parse_btf
from objbtf.btf_file import chunks_of
from objbtf.elf.reader import ElfFile
from saved_commands import saved_command

pytestmark = [pytest.mark.kernel, pytest.mark.dwarfless]

#: The sections of the temporary vmlinux that hold the objects' BTF for its link.
LINKED_OBJECTS_BTF = {'.BTF.objects', '.BTF.objbtf', '.BTF.addrs'}


#: The DWARF-less builds of the reference config (kernel_matrix.py).
GBTF_BUILDS = ['kbuild_6_1_gbtf', 'kbuild_6_12_gbtf', 'kbuild_7_2_gbtf']
#: Version -> the build of the same config with DWARF that its DWARF-less one needs.
DWARF_TWIN = {BY_FIXTURE[f].version: BY_FIXTURE[f].needs[0] for f in GBTF_BUILDS}


@pytest.fixture(scope='module', params=GBTF_BUILDS)
def gbtf(request) -> KernelBuild:
    """The DWARF-less build of one version (conftest, kbuild_tree.py)."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope='module')
def gbtf_modules(gbtf) -> list[Path]:
    return gbtf.modules()


def vmlinux_btf(build: Path) -> Btf:
    return parse_btf(sections(build / 'vmlinux')['.BTF'][0])


@dataclass
class DwarfPath:
    """The DWARF path's build of the same version and configuration: its
    final BTF, the objects of its vmlinux (with DWARF), and the temporary
    vmlinux its link read (the objects' chunks)."""
    btf: Btf
    members: list[Path]
    linked: Path


@pytest.fixture(scope='module')
def dwarf_path(gbtf, request) -> DwarfPath:
    """The build of the same version and configuration with DWARF, through
    the integration: the build the DWARF-less one needs in kernel_matrix."""
    tree: KernelBuild = request.getfixturevalue(DWARF_TWIN[gbtf.version])
    return DwarfPath(vmlinux_btf(tree.build), vmlinux_members(tree.build), tree.tmp_vmlinux)


def test_configured_without_dwarf(gbtf):
    build = gbtf.build
    config = gbtf.config()
    for line in ('CONFIG_OBJBTF_GBTF=y', 'CONFIG_DEBUG_INFO_NONE=y', 'CONFIG_DEBUG_INFO_BTF=y',
                 'CONFIG_DEBUG_INFO_BTF_MODULES=y'):
        assert f'\n{line}\n' in config, line
    assert '\nCONFIG_DEBUG_INFO=y\n' not in config
    saved = saved_command(build / 'kernel/fork.o')
    assert ' -gbtf ' in f'{saved} ' and not re.search(r' -g(dwarf\S*)? ', saved)


def test_no_dwarf_anywhere(gbtf, gbtf_modules):
    """No object, module or vmlinux carries DWARF debug information (GCC
    still writes the call frame information, .debug_frame, under -gbtf);
    every object of vmlinux and the modules carries objbtf's chunk, the vDSO
    no BTF."""
    build = gbtf.build
    members = vmlinux_members(build)
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
    assert '.BTF' not in sections(vdso_image(build))


def test_no_second_copy_of_the_objects_btf(gbtf):
    """Once vmlinux's BTF is linked, the DWARF-less build keeps no copy of
    the objects' BTF in the temporary vmlinux (the build with DWARF keeps
    it, as stock does: test_kbuild reads it): 6.1 removes .tmp_vmlinux.btf,
    which nothing reads again; 6.12 and 7.2 take the sections out of
    .tmp_vmlinux1, whose symbols the kallsyms steps read."""
    assert gbtf.btf_object.exists() and (gbtf.build / 'vmlinux').exists()
    if gbtf.version == '6.1':
        assert not gbtf.tmp_vmlinux.exists()
    else:
        names = set(sections(gbtf.tmp_vmlinux))
        assert '.symtab' in names and not names & LINKED_OBJECTS_BTF


def test_with_kallsyms_the_btf_link_keeps_only_its_symbols(kbuild_6_1_gbtf_kallsyms,
                                                           kernel_loader):
    """6.1 with kallsyms: the BTF link is the first kallsyms link, whose
    symbols the kallsyms step reads; the switch takes the objects' BTF out
    of it (objcopy) rather than removing it, and the build goes on to a
    vmlinux with kallsyms and BTF the kernel accepts, and valid modules."""
    tree = kbuild_6_1_gbtf_kallsyms
    assert tree.tmp_vmlinux.name == '.tmp_vmlinux.kallsyms1'
    assert not (tree.build / '.tmp_vmlinux.btf').exists()
    names = set(sections(tree.tmp_vmlinux))
    assert '.symtab' in names and not names & LINKED_OBJECTS_BTF
    assert 'kallsyms_names' in (tree.build / 'System.map').read_text()
    vmlinux = tree.build / 'vmlinux'
    kernel = objbtf('check', '--kernel', vmlinux, check=False)
    assert kernel.returncode == 0, kernel.stdout + kernel.stderr
    modules = tree.modules()
    assert len(modules) == 3
    for ko in modules:
        assert_valid_split_btf(vmlinux, ko)


def test_the_btf_link_says_what_the_btf_lacks(gbtf, dwarf_path):
    """Under Kbuild's quiet output, vmlinux's BTF link says once, in two
    lines, that its BTF came from GCC's -gbtf and lacks what GCC 12's
    lacks; no module link says it.  Every enum an object's chunk counted
    lost enumerators on the DWARF path too (``lost_enumerators``): no
    false positive on a real kernel."""
    notes = [line for line in gbtf.stderr.splitlines() if line.startswith('objbtf link: note: ')]
    assert len(notes) == 2 and 'enumerators outside 32 bits (' in notes[0], notes
    assert 'docs/dwarfless.md' in notes[1]
    counted = {name for obj in vmlinux_members(gbtf.build) for chunk in chunks_of(str(obj))
               for _, name in chunk.losses}
    assert counted <= set(lost_enumerators(dwarf_path.btf))


def test_vmlinux_btf_is_valid(gbtf, kernel_loader):
    build = gbtf.build
    vmlinux = build / 'vmlinux'
    assert objbtf('check', vmlinux).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    assert dump.stdout.count('\n') > 40000
    assert_the_running_kernel_accepts(vmlinux)


def test_modules_have_valid_split_btf(gbtf, gbtf_modules):
    build = gbtf.build
    vmlinux = build / 'vmlinux'
    assert REFERENCE_MODULES <= {ko.name for ko in gbtf_modules}
    for ko in gbtf_modules:
        assert_valid_split_btf(vmlinux, ko)


# --- against the DWARF path --------------------------------------------------

@pytest.fixture(scope='module')
def reference_facts(dwarf_path) -> dict[str, Counter]:
    """gcc_btf_facts.dwarf_facts summed over the DWARF build's vmlinux objects."""
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return summed(pool.map(dwarf_facts, map(str, dwarf_path.members), chunksize=16))


def test_same_btf_as_the_dwarf_path(gbtf, dwarf_path, reference_facts):
    """The DWARF-less vmlinux has the DWARF path's types but for what GCC 12's
    BTF lacks or adds (gcc_btf_facts), each derived from the DWARF build;
    the fixtures' enums show the enumerator loss is there to derive."""
    build = gbtf.build
    ours = vmlinux_btf(build)
    assert lost_enumerators(dwarf_path.btf) and not lost_enumerators(ours)
    problems = unexplained(ours, dwarf_path.btf, reference_facts,
                           dwarf_only_drops(dwarf_path.linked))
    assert problems == []
