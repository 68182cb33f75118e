"""What a tree's own BTF step makes of the same objects with the newest
pahole, for the trees whose step is ``scripts/gen-btf.sh`` (Linux 7.x):
``pahole -J $(PAHOLE_FLAGS)``, then the tree's ``resolve_btfids``, which
sorts the types, rewrites the kfuncs and adds ``_impl`` functions.

The objbtf build's vmlinux keeps its objects' DWARF, so pahole reads it
there; ``resolve_btfids`` reads the kfunc flags in ``.BTF_ids``, which the
build has since filled with objbtf's ids and sorted, so it gets the
section as the temporary link had it, before ``--patch_btfids``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from conftest import run
from kbuild_tree import KernelBuild, objbtf_command, sections
from kernel_tree import make_value


def pahole_flags(tree: KernelBuild) -> list[str]:
    """``PAHOLE_FLAGS`` as the tree's ``scripts/Makefile.btf`` sets them for
    the pahole objbtf stands in for (OBJBTF set: the newest's)."""
    return make_value(tree.build, 'PAHOLE_FLAGS', *tree.make_args,
                      f'OBJBTF={objbtf_command()}').split()


def _resolve_btfids(tree: KernelBuild) -> Path:
    return tree.build / 'tools/bpf/resolve_btfids/resolve_btfids'


def stock_vmlinux_btf(tree: KernelBuild, pahole: Path, work: Path) -> bytes:
    """vmlinux's final BTF as the stock step makes it from the same objects."""
    elf = work / 'vmlinux'
    shutil.copyfile(tree.build / 'vmlinux.unstripped', elf)
    ids = work / 'BTF_ids'
    run('objcopy', '-O', 'binary', '--only-section=.BTF_ids', tree.tmp_vmlinux, ids)
    run('objcopy', f'--update-section=.BTF_ids={ids}', elf)
    run(pahole, '-J', *pahole_flags(tree), f'--btf_encode_detached={elf}.BTF.1', elf)
    run(_resolve_btfids(tree), '--btf', f'{elf}.BTF.1', elf)
    return Path(f'{elf}.BTF').read_bytes()


def stock_module_btf(tree: KernelBuild, pahole: Path, flags: list[str], ko: Path,
                     work: Path) -> bytes:
    """A module's split BTF as the stock step makes it, on the objbtf
    build's vmlinux (the same base ids as the module's own BTF), with
    ``flags`` (``pahole_flags``, asked of make once for all the modules).

    The newest pahole leaves in it copies of base types (``Elf32_Word``,
    ``__u8``...) that its dedup does not find in a base sorted by name, as
    7.x's resolve_btfids leaves vmlinux's (Debian's pahole 1.24 finds them):
    ``deduplicated`` passes it through libbpf's own ``btf__dedup`` on the
    same base first, so that the content is compared, not that."""
    elf = work / ko.name
    shutil.copyfile(ko, elf)
    vmlinux = tree.build / 'vmlinux'
    run(pahole, '-J', *flags, '--btf_base', vmlinux,
        f'--btf_encode_detached={elf}.BTF.1', elf)
    run(_resolve_btfids(tree), '--btf_base', vmlinux, '--btf', f'{elf}.BTF.1', elf)
    return Path(f'{elf}.BTF').read_bytes()


def deduplicated(split: bytes, tree: KernelBuild) -> bytes:
    """``split`` through libbpf's btf__dedup on the build's vmlinux BTF."""
    from libbpf_oracle import libbpf_dedup
    return libbpf_dedup(split, sections(tree.build / 'vmlinux')['.BTF'][0])
