#!/usr/bin/env python3
"""A whole kernel build with objbtf against the stock build (pahole), in one run.

One copy of the Linux 6.1 source, patched with kbuild-integration/apply, and
two O= build directories configured as the reference kernel: one built with
``make OBJBTF=objbtf`` (objbtf installed plainly in bench/.venv, or $OBJBTF),
one with ``OBJBTF=`` (the stock way, with pahole: the patches change nothing
then). For each: ``make -jN vmlinux modules`` from scratch (wall and CPU
time), then, after touching one .c file, the rebuild (wall and CPU). Appends
the figures to bench/RESULTS.md with the command. About 35 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from encode_bench import installed_objbtf

HERE = Path(__file__).resolve().parent
INTEGRATION = HERE.parent / 'kbuild-integration'
PRISTINE = Path(os.environ.get('OBJBTF_KERNEL_DIR', '/var/cache/objbtf/kernel-6.1')) / 'linux'
TARBALL = Path('/usr/src/linux-source-6.1.tar.xz')


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine_cpu() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat)."""
    with open('/proc/stat') as f:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf('SC_CLK_TCK')


def timed_make(src: Path, build: Path, jobs: int, *args: str) -> tuple[float, float, float]:
    """(wall, CPU, CPU of other processes meanwhile) seconds of one make run,
    which must succeed."""
    cpu, busy, wall = child_cpu(), machine_cpu(), time.monotonic()
    subprocess.run(['make', '-C', str(src), f'O={build}', f'-j{jobs}', *args, 'vmlinux', 'modules'],
                   check=True, stdout=subprocess.DEVNULL)
    cpu = child_cpu() - cpu
    return time.monotonic() - wall, cpu, machine_cpu() - busy - cpu


def source_tree(dest: Path) -> Path:
    if PRISTINE.is_dir():
        shutil.copytree(PRISTINE, dest, symlinks=True)
    else:
        dest.mkdir()
        subprocess.run(['tar', '-xf', str(TARBALL), '-C', str(dest), '--strip-components=1'],
                       check=True)
    subprocess.run([str(INTEGRATION / 'apply'), str(dest)], check=True, stdout=subprocess.DEVNULL)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('-j', '--jobs', type=int, default=2)
    ap.add_argument('--touch', default='kernel/fork.c', help='source file touched before the rebuild')
    ap.add_argument('--work', type=Path, help='work directory (default: a temporary one, removed)')
    opts = ap.parse_args()

    work = opts.work or Path(tempfile.mkdtemp(prefix='kbuild-bench-'))
    objbtf = os.environ.get('OBJBTF') or installed_objbtf()
    variants = {'objbtf': [f'OBJBTF={objbtf}'], 'stock (pahole)': ['OBJBTF=']}
    try:
        src = source_tree(work / 'linux')
        builds = {name: work / f'build-{i}' for i, name in enumerate(variants)}
        for build in builds.values():
            subprocess.run([str(INTEGRATION / 'configure'), str(src), str(build)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        full = {name: timed_make(src, builds[name], opts.jobs, *args) for name, args in variants.items()}
        (src / opts.touch).touch()
        rebuild = {name: timed_make(src, builds[name], opts.jobs, *args) for name, args in variants.items()}
    finally:
        if opts.work is None:
            shutil.rmtree(work, ignore_errors=True)

    lines = [f'make -j{opts.jobs} vmlinux modules, Linux 6.1, reference config (tinyconfig + BTF + 3 modules)',
             f'{"":16} {"full wall":>10} {"full CPU":>10} {"rebuild wall":>13} {"rebuild CPU":>12}'
             f'   (rebuild: after touching {opts.touch})']
    for name in variants:
        lines.append(f'{name:16} {full[name][0]:9.0f}s {full[name][1]:9.0f}s '
                     f'{rebuild[name][0]:12.1f}s {rebuild[name][1]:11.1f}s')
    lines.append('CPU used by other processes meanwhile: '
                 + ', '.join(f'{name} {full[name][2]:.0f}s (full), {rebuild[name][2]:.1f}s (rebuild)'
                             for name in variants))
    o, s = 'objbtf', 'stock (pahole)'
    lines.append(f'objbtf / stock: full wall {full[o][0] / full[s][0]:.2f}, full CPU '
                 f'{full[o][1] / full[s][1]:.2f}, rebuild wall {rebuild[o][0] / rebuild[s][0]:.2f}')
    report = '\n'.join(lines)
    print(report)
    command = shlex.join(['python3', 'bench/kbuild_bench.py', *sys.argv[1:]])
    with open(HERE / 'RESULTS.md', 'a') as f:
        f.write(f'\n## kbuild, {time.strftime("%Y-%m-%d %H:%M")}\n\n`{command}`\n\n```\n{report}\n```\n')


if __name__ == '__main__':
    main()
