"""An encoded copy of the reference kernel's build tree, linked as Kbuild links it.

The reference tree is Linux 6.1 built through the Kbuild integration
(kernel_matrix.REFERENCE): its objects keep their DWARF beside their BTF.
This copies it, encodes every object again, and runs the kernel's own link
commands again: the temporary vmlinux link of scripts/link-vmlinux.sh (with
--strip-debug, as the integration links it: objbtf needs no DWARF at link
time) and each module's saved `ld -r`.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

from saved_commands import first_command

TMP_VMLINUX = '.tmp_vmlinux.objbtf'
#: What the vmlinux link takes besides vmlinux.a's members.
EXTRA_VMLINUX_OBJECTS = ('.vmlinux.export.o', 'init/version-timestamp.o')
#: scripts/link-vmlinux.sh's vmlinux_link for this config (KBUILD_LDFLAGS,
#: LDFLAGS_vmlinux, the linker script and the objects).
VMLINUX_LINK = ('ld -m elf_x86_64 -z noexecstack --no-warn-rwx-segments '
                '-z max-page-size=0x200000 --build-id=sha1 --orphan-handling=warn '
                '--strip-debug --script=./arch/x86/kernel/vmlinux.lds -o {out} '
                '--whole-archive {archive} ' + ' '.join(EXTRA_VMLINUX_OBJECTS) + ' '
                '--no-whole-archive --start-group --end-group')
#: The empty kallsyms tables 7.x's link-vmlinux.sh links its first vmlinux
#: with (after the group, as it does): kallsyms.c's symbols are no longer weak.
KALLSYMS_OBJECT = '.tmp_vmlinux0.kallsyms.o'


def _encode(tree: str, path: str) -> None:
    """Encode ``path`` from the top of ``tree``, as Kbuild does: each object's
    chunk names it as vmlinux.a and the modules' .mod files do."""
    from objbtf.encode.object_file import encode_path
    from objbtf.features import Features
    os.chdir(tree)
    encode_path(path, Features())


#: Host programs built along the kernel, never linked into it.
HOST_DIRS = ('scripts', 'tools')
#: Where x86's boot image (bzImage: the real-mode setup code, the
#: decompressor) keeps its objects, beside the startup code vmlinux holds.
BOOT_DIRS = ('arch/x86/boot/',)


#: Objects a build makes of the linked kernel, not of its sources: vmlinux.o
#: (all of them in one), and the object of vmlinux's final BTF (6.1's, 6.12's
#: and 7.x's).
LINK_PRODUCTS = ('vmlinux.o', '.btf.vmlinux.bin.o', '.tmp_vmlinux1.btf.o')


def objects(tree: Path) -> list[Path]:
    """The kernel's objects: what vmlinux and the modules are linked from,
    without LINK_PRODUCTS, the host programs and the boot image's own
    objects (those of BOOT_DIRS that vmlinux.a does not hold)."""
    archive = tree / 'vmlinux.a'
    in_vmlinux = set(subprocess.run(['ar', 't', str(archive)], check=True, capture_output=True,
                                    text=True).stdout.split()) if archive.exists() else set()

    def kept(rel: Path) -> bool:
        boot_only = str(rel).startswith(BOOT_DIRS) and str(rel) not in in_vmlinux
        return rel.name not in LINK_PRODUCTS and rel.parts[0] not in HOST_DIRS and not boot_only
    return sorted(p for p in tree.rglob('*.o') if kept(p.relative_to(tree)))


def encoded_tree(build: Path, dest: Path) -> Path:
    """``dest`` holding an encoded, relinked copy of ``build``."""
    shutil.copytree(build, dest, symlinks=True)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        paths = [str(p.relative_to(dest)) for p in objects(dest)]
        list(pool.map(partial(_encode, str(dest)), paths, chunksize=16))
    link_vmlinux(dest, TMP_VMLINUX)
    for ko in dest.rglob('*.ko'):
        relink_module(dest, ko)
    return dest


#: The integration's script for the temporary vmlinux link, given before
#: vmlinux.lds (which discards the objects' .BTF): it gathers them in
#: .BTF.objects.
OBJECTS_LDS = 'source/scripts/btf-objects.lds'


def link_vmlinux(tree: Path, out: str, archive: str = 'vmlinux.a') -> Path:
    """``out`` linked from ``archive`` as link-vmlinux.sh links vmlinux, its
    objects' BTF concatenated and relocated in .BTF, as the stock
    vmlinux.lds leaves it (objbtf link's default section), in a stock tree
    (the benchmarks') and in one built through the integration."""
    cmd = shlex.split(VMLINUX_LINK.format(out=out, archive=archive))
    if (tree / KALLSYMS_OBJECT).exists():
        cmd.append(KALLSYMS_OBJECT)
    integrated = (tree / OBJECTS_LDS).exists()
    if integrated:
        cmd.insert(cmd.index('--script=./arch/x86/kernel/vmlinux.lds'), f'--script={OBJECTS_LDS}')
    subprocess.run(cmd, cwd=tree, check=True, capture_output=True)
    if integrated:
        subprocess.run(['objcopy', '--remove-section=.BTF', '--rename-section=.BTF.objects=.BTF',
                        out], cwd=tree, check=True, capture_output=True)
    return tree / out


def relink_module(tree: Path, ko: Path) -> None:
    """Run the module's saved `ld -r` again, now over encoded objects."""
    subprocess.run(first_command(ko), cwd=tree, check=True, capture_output=True)


#: What auto.conf.cmd says Kconfig read of the integration's variables
#: (OBJBTF, OBJBTF_GBTF: kbuild-integration) and of pahole's version.
_KCONFIG_READ = re.compile(r'^ifneq "\$\(((?:OBJBTF|PAHOLE)\w*)\)" "(.*)"$', re.M)


def configured_with(build: Path) -> list[str]:
    """The make arguments (``VAR=value``) of the integration's variables
    and pahole's version as Kconfig read them when ``build`` was
    configured: a make in the tree without them, or with other values,
    configures it again, and its next build rebuilds everything.  Kconfig
    read OBJBTF as the integration rewrote it (the quick client's command,
    OBJBTF_COMMAND): given as that, the integration keeps it as it is and
    asks objbtf nothing."""
    cmd = build / 'include' / 'config' / 'auto.conf.cmd'
    text = cmd.read_text() if cmd.exists() else ''
    found = dict(_KCONFIG_READ.findall(text))
    if 'OBJBTF' in found:
        found['OBJBTF_COMMAND'] = found['OBJBTF']
    return [f'{name}={value}' for name, value in found.items()]


def make_value(build: Path, variable: str, *args: str) -> str:
    """``$(variable)`` as the tree's Kbuild sets it (how gen-btf.sh gets
    PAHOLE_FLAGS), with the make arguments ``args`` after those the tree
    was configured with (``configured_with``)."""
    target = 'objbtf-print-variable'
    out = subprocess.run(['make', '-s', '-C', str(build), *configured_with(build), *args,
                          f'--eval={target}: ; @echo $({variable})', target],
                         check=True, capture_output=True, text=True).stdout.strip()
    return out.splitlines()[-1] if out else ''


def pahole_flags(build: Path, pahole: str = 'pahole') -> list[str]:
    """The flags the tree's Kbuild gives ``pahole -J``: 6.1's
    scripts/pahole-flags.sh asks pahole its version; from 6.8 on,
    scripts/Makefile.btf sets PAHOLE_FLAGS by the configured version, its
    ``-j`` as ``make -jN`` with this machine's CPUs gives it."""
    script = build / 'source' / 'scripts' / 'pahole-flags.sh'
    if not script.exists():
        return make_value(build, 'PAHOLE_FLAGS', f'PAHOLE={pahole}',
                          f'-j{len(os.sched_getaffinity(0))}').split()
    out = subprocess.run(['sh', str(script)], env=dict(os.environ, PAHOLE=pahole),
                         check=True, capture_output=True, text=True).stdout
    return out.split()


def link_features(build: Path, pahole_flags: list[str]) -> list[str]:
    """The ``objbtf link`` arguments that choose the features the tree's
    Kbuild gives it: on 7.x, gen-btf.sh's, the --btf_features lists of
    PAHOLE_FLAGS joined; on 6.x, none (objbtf's defaults)."""
    if not (build / 'source' / 'scripts' / 'gen-btf.sh').exists():
        return []
    found = [f.split('=', 1)[1] for f in pahole_flags if f.startswith('--btf_features=')]
    return ['--btf-features', ','.join(found) or 'default']
