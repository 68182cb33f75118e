#!/usr/bin/env python3
"""objbtf link against the kernel's own BTF step, on the same pre-BTF vmlinux, in turns.

The peer is what 6.1's link-vmlinux.sh runs: ``pahole -J`` with the flags
scripts/pahole-flags.sh gives the pahole (by its version): the installed one
(1.24: ``--btf_gen_floats -j --lang_exclude=rust``), or ``--pahole PATH``,
the newest built from vendor/ (tests/newest_pahole.py), here with ``--btf_encode_detached`` so that the
input stays as it is (the kernel's step writes .BTF into the file and cuts it
out again with objcopy; leaving that out favours pahole).  Both tools read one
file: the reference kernel's objects, encoded (testsupport/kernel_tree.py), linked
as link-vmlinux.sh links .tmp_vmlinux.btf, DWARF kept, so that it holds what
each reads (pahole the DWARF, objbtf link the per-object BTF).

The commands run in turns (A B A B ...) --repeat times; the report gives the
median wall time, the median CPU (user + system, children included) and the
largest peak memory: the PSS summed over the command's processes, sampled
(objbtf link -j forks workers, which share pages), and the largest single
process's max RSS.  objbtf runs in process (OBJBTF_RESIDENT=0): its resident
server's cost belongs to the whole build (kbuild_bench.py).

Then what an incremental build pays, with the link cache (``--cache``) that
the Kbuild integration uses, against pahole, which has no incremental mode:

- after an edit to a function body: kernel/fork.c compiled again, its types
  unchanged, so the link replays the cache;
- after an edit to a type: kernel/fork.c compiled again with one more
  struct, so the cache misses and the link is a full one.

And the modules' links, objbtf link --base against what
scripts/Makefile.modfinal runs, pahole -J with the same flags --btf_base
vmlinux.  objbtf link also runs with -j 1, and on the same vmlinux without
.BTF.objbtf, where its -j processes hash every object's types themselves.
--kernel-modules uses the modules-heavy configuration (build-kernel.sh --modules).
objbtf's module links get the index of vmlinux's BTF that Kbuild gives them
(``--base-index``), made by a first link before the timed runs.

``--modules-only`` measures the module links alone, module by module: the
CPU of ``objbtf link --base`` with ``--base-index``, without it, and of
pahole, each a process, in turns; and the CPU of the two objbtf links inside
this process (no interpreter start-up: what the resident server's children
pay).  It checks first that both objbtf links give every module the same bytes.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This checkout's objbtf, in this process, its workers and the tools it runs.
sys.path[:0] = [str(HERE.parent), str(HERE.parent / 'testsupport')]
os.environ['PYTHONPATH'] = os.pathsep.join(filter(None, [str(HERE.parent),
                                                         os.environ.get('PYTHONPATH')]))
os.environ['OBJBTF_RESIDENT'] = '0'
from accounting import interleaved  # noqa: E402
from encode_bench import reference_kernel  # noqa: E402
from kernel_tree import VMLINUX_LINK, encoded_tree, pahole_flags  # noqa: E402
from harness import pahole_version, record  # noqa: E402
from saved_commands import first_command  # noqa: E402

#: The encoded objects linked as .tmp_vmlinux.btf, DWARF kept: both tools' input.
SHARED_VMLINUX = '.tmp_vmlinux.shared'


def link_shared(tree: Path) -> Path:
    """Link the encoded objects as .tmp_vmlinux.btf is linked, DWARF kept."""
    cmd = VMLINUX_LINK.replace('--strip-debug ', '').format(out=SHARED_VMLINUX, archive='vmlinux.a')
    subprocess.run(shlex.split(cmd), cwd=tree, check=True, capture_output=True)
    return tree / SHARED_VMLINUX


def recompile(tree: Path, obj: str, extra: list[str] | None = None) -> None:
    """Compile ``obj`` again with its saved command (plus ``extra`` flags),
    encode it, and relink the temporary vmlinux, as Kbuild would."""
    argv = first_command(tree / obj)
    argv[1:1] = extra or []
    subprocess.run(argv, cwd=tree, check=True, capture_output=True)
    subprocess.run([sys.executable, '-m', 'objbtf', 'encode', obj], cwd=tree, check=True)
    link_shared(tree)


def module_links(build: Path, tree: Path, vmlinux_btf: Path, work: Path,
                 objbtf: list[str], peer: list[str]) -> tuple[int, list[list[str]]]:
    """How many modules, and two commands, each giving every module its
    split BTF: objbtf link (on the encoded tree, against the BTF objbtf
    linked for vmlinux) and pahole (on the stock tree, against its vmlinux),
    as Makefile.modfinal runs them; neither changes the module files."""
    modules = sorted(str(ko.relative_to(build)) for ko in build.rglob('*.ko'))
    index = work / 'vmlinux.index'      # as Kbuild's .btf.vmlinux.index
    ours = ' && '.join(shlex.join(objbtf + ['link', '--base', str(vmlinux_btf), '--base-index',
                                            str(index), '-o', str(work / 'm.btf'),
                                            str(tree / m)])
                       for m in modules)
    subprocess.run(['sh', '-c', ours], check=True, capture_output=True)    # makes the index
    theirs = ' && '.join(shlex.join([*peer, '--btf_base', str(build / 'vmlinux'),
                                     '--btf_encode_detached', str(work / 'p.btf'),
                                     str(build / m)])
                         for m in modules)
    return len(modules), [['sh', '-c', ours], ['sh', '-c', theirs]]


def in_process_cpu(ko: Path, base: Path, index: Path | None, out: Path, n: int) -> float:
    """Median CPU seconds of ``n`` module links in this process, after one
    that imports everything (and makes the index)."""
    from linkdedup.pipeline import link
    from linkdedup.settings import LinkSettings
    from objbtf.features import Features

    def once() -> float:
        start = time.process_time()
        link(LinkSettings(str(ko), Features(), base_path=str(base), output=str(out),
                          base_index=str(index) if index else None, jobs=1, quiet=True))
        return time.process_time() - start
    once()
    return statistics.median(once() for _ in range(n))


def module_bench(build: Path, tree: Path, vmlinux_btf: Path, work: Path, objbtf: list[str],
                 peer: list[str], repeat: int) -> str:
    """Per module CPU: objbtf link with and without --base-index, as a
    process and in this one, and pahole --btf_base; same bytes checked."""
    kos = sorted(p.relative_to(tree) for p in tree.rglob('*.ko'))
    index = work / 'vmlinux.index'
    a, b = work / 'a.btf', work / 'b.btf'
    rows = []
    for ko in kos:
        plain = objbtf + ['link', '-q', '--base', str(vmlinux_btf), '-o', str(a), str(tree / ko)]
        indexed = plain[:7] + ['--base-index', str(index), '-o', str(b), str(tree / ko)]
        subprocess.run(plain, check=True)
        subprocess.run(indexed, check=True)
        if a.read_bytes() != b.read_bytes():
            sys.exit(f'{ko}: the split BTF differs with --base-index')
        pahole = [*peer, '--btf_base', str(build / 'vmlinux'),
                  '--btf_encode_detached', str(work / 'p.btf'), str(build / ko)]
        ours, theirs, bare = interleaved(repeat, [indexed, pahole, plain])
        rows.append((theirs.cpu, ours.cpu, bare.cpu,
                     in_process_cpu(tree / ko, vmlinux_btf, index, b, repeat),
                     in_process_cpu(tree / ko, vmlinux_btf, None, a, repeat)))
    total = [sum(c) for c in zip(*rows)]
    ratio = [statistics.median(r[i] / r[0] for r in rows) for i in range(5)]
    names = ('pahole --btf_base', 'objbtf link --base-index, a process',
             'objbtf link, a process (no index)', 'objbtf link --base-index, in-process',
             'objbtf link, in-process (no index)')
    lines = [f'{len(kos)} modules, the same split BTF with and without --base-index; CPU per '
             f'module (median of {repeat} runs each, in turns), summed over the modules, and '
             f'the median of the per-module ratios to pahole (goal <= 1.0):']
    lines += [f'  {name:<40} {t:6.2f} s, ratio {r:.2f}' for name, t, r in zip(names, total, ratio)]
    return '\n'.join(lines)


def modules_only(args: argparse.Namespace, build: Path, peer: list[str],
                 objbtf: list[str]) -> str:
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        print('preparing an encoded copy of the kernel tree...', file=sys.stderr)
        tree = encoded_tree(build, work / 'build')
        out = work / 'vmlinux.btf'
        subprocess.run(objbtf + ['link', '-q', '-o', str(out), str(link_shared(tree))],
                       check=True)
        return module_bench(build, tree, out, work, objbtf, peer, args.repeat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--kernel-modules', action='store_true',
                    help='the modules-heavy configuration (build-kernel.sh --modules)')
    ap.add_argument('--pahole', default='pahole', metavar='PATH',
                    help="the peer: this pahole, with the flags the kernel's pahole-flags.sh "
                         'gives its version (default: the installed one)')
    ap.add_argument('--no-record', action='store_true')
    ap.add_argument('--modules-only', action='store_true',
                    help='only the module links, module by module, CPU')
    args = ap.parse_args()
    build = reference_kernel(args.kernel_modules)
    peer = [args.pahole, '-J', *pahole_flags(build, args.pahole)]
    version = pahole_version(args.pahole)
    objbtf = [sys.executable, '-m', 'objbtf']
    # Byte-compiled, as an installed objbtf is (pip compiles what it installs).
    subprocess.run([sys.executable, '-m', 'compileall', '-q', str(HERE.parent / 'objbtf'),
                    str(HERE.parent / 'linkdedup')], check=True)
    if args.modules_only:
        return report_and_record(args, 'module links', modules_only(args, build, peer, objbtf))
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        print('preparing an encoded copy of the kernel tree...', file=sys.stderr)
        tree = encoded_tree(build, work / 'build')
        shared = link_shared(tree)
        out, cache, warm = work / 'out.btf', work / 'link.cache', work / 'warm.cache'
        pahole = [*peer, '--btf_encode_detached', str(work / 'pahole.btf'), str(shared)]
        link = objbtf + ['link', '-o', str(out), str(shared)]
        link_j1 = objbtf + ['link', '-j', '1', '-o', str(out), str(shared)]
        bare = work / 'bare'
        subprocess.run(['objcopy', '--remove-section', '.BTF.objbtf', str(shared), str(bare)],
                       check=True)
        bare_link = objbtf + ['link', '-o', str(out), str(bare)]
        cached_link = objbtf + ['link', '--cache', str(cache), '-o', str(out), str(shared)]
        p, o, o1 = interleaved(args.repeat, [pahole, link, link_j1])
        b, b1, p0 = interleaved(args.repeat, [bare_link, bare_link[:4] + ['-j', '1'] + bare_link[4:],
                                              pahole])
        subprocess.run(link, check=True)        # what the modules' BTF is based on
        count, commands = module_links(build, tree, out, work, objbtf, peer)
        m, pm = interleaved(args.repeat, commands)
        subprocess.run(cached_link, check=True, capture_output=True)
        shutil.copy(cache, warm)
        recompile(tree, 'kernel/fork.o')
        body, p2 = interleaved(args.repeat, [cached_link, pahole])
        replayed = 'replayed' in subprocess.run(cached_link, check=True, capture_output=True,
                                                text=True).stderr
        extra = work / 'extra.h'
        extra.write_text('struct objbtf_bench { int a; long b; };\n'
                         'struct objbtf_bench objbtf_bench_var __attribute__((used));\n')
        recompile(tree, 'kernel/fork.o', ['-include', str(extra)])
        # Each run starts from the cache of the link before the type edit.
        missing = ['sh', '-c', f'cp {warm} {cache} && exec "$@"', 'sh'] + cached_link
        typed, p3 = interleaved(args.repeat, [missing, pahole])
    report = (f'{"modules" if args.kernel_modules else "reference"} configuration; peer: '
              f'`{shlex.join(peer)}` ({version})\n'
              f'pahole: {p}\n'
              f'objbtf link (-j {len(os.sched_getaffinity(0))}): {o}\n'
              f'objbtf link -j 1: {o1}\n'
              f'objbtf / pahole: wall {o.wall / p.wall:.2f} (goal <= 0.5), CPU {o.cpu / p.cpu:.2f}, '
              f'peak PSS {o.pss / p.pss:.2f} (goal <= 1.0), largest process {o.rss / p.rss:.2f}\n'
              f'without .BTF.objbtf (the link hashes): objbtf link {b}, wall {b.wall / p0.wall:.2f} x '
              f'pahole; -j 1: {b1.wall:.2f} s\n'
              f'modules ({count}, split BTF on vmlinux\'s, one after the other): objbtf link {m}; '
              f'pahole --btf_base {pm}; wall {m.wall / pm.wall:.2f}, CPU {m.cpu / pm.cpu:.2f} '
              f'(goal <= 1.0)\n'
              f'after a function-body edit (cache {"replayed" if replayed else "NOT replayed"}): '
              f'objbtf link {body.wall:.2f} s = {body.wall / p2.wall:.2f} x pahole (goal <= 0.2)\n'
              f'after a type edit (cache miss, full link): '
              f'objbtf link {typed.wall:.2f} s = {typed.wall / p3.wall:.2f} x pahole')
    return report_and_record(args, 'link', report)


def report_and_record(args: argparse.Namespace, title: str, report: str) -> int:
    """Print ``report`` and, unless --no-record, append it to RESULTS.md."""
    print(report)
    if not args.no_record:
        record(title, report, f'(median wall and CPU of {args.repeat} runs each, the tools '
                              f'taking turns; load average {os.getloadavg()[0]:.1f} at the end)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
