#!/usr/bin/env python3
"""objbtf link against pahole -J on the reference kernel, in one run.

pahole runs on the stock tree's pre-BTF vmlinux (.tmp_vmlinux.btf), as
link-vmlinux.sh runs it; objbtf link on an encoded copy of the same tree,
relinked as Kbuild would (tests/kernel_tree.py).  Each is run --repeat
times; the median wall time and the largest max RSS are reported, with
their ratios, and appended to bench/RESULTS.md.

Then what an incremental build pays, with the link cache (``--cache``) that
the Kbuild integration uses, against pahole, which has no incremental mode:

- after an edit to a function body: kernel/fork.c compiled again, its types
  unchanged, so the link replays the cache;
- after an edit to a type: kernel/fork.c compiled again with one more
  struct, so the cache misses and the link is a full one.

And the modules' links, objbtf link --base against pahole --btf_base.

objbtf link runs with its default -j (the CPUs) and with -j 1; and on the
same vmlinux without .BTF.objbtf, where its -j processes hash every
object's types themselves.  Max RSS is that of the largest process.
"""
from __future__ import annotations

import argparse
import os
import re
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
sys.path[:0] = [str(HERE.parent), str(HERE.parent / 'tests')]
os.environ['PYTHONPATH'] = os.pathsep.join(filter(None, [str(HERE.parent),
                                                         os.environ.get('PYTHONPATH')]))
from kernel_tree import TMP_VMLINUX, encoded_tree, link_vmlinux  # noqa: E402

KERNEL_SCRIPT = HERE.parent.parent / 'shared' / 'corpus' / 'build-kernel.sh'


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, max RSS in MB) of one run of ``cmd``."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if status != 0:
        sys.exit(f'{" ".join(cmd)} failed: {proc.stderr.read().decode()[-500:]}')
    return wall, usage.ru_maxrss // 1024


def interleaved(n: int, cmds: list[list[str]]) -> list[tuple[float, int]]:
    """(median wall, largest max RSS) of each command, run in turns n times:
    load from elsewhere on the machine then falls on all of them alike."""
    runs: list[list[tuple[float, int]]] = [[] for _ in cmds]
    for _ in range(n):
        for i, cmd in enumerate(cmds):
            runs[i].append(measure(cmd))
    return [(statistics.median(w for w, _ in r), max(m for _, m in r)) for r in runs]


def recompile(tree: Path, obj: str, extra: list[str] | None = None) -> None:
    """Compile ``obj`` again with its saved command (plus ``extra`` flags),
    encode it, and relink the temporary vmlinux, as Kbuild would."""
    cmd_file = tree / Path(obj).parent / f'.{Path(obj).name}.cmd'
    line = re.search(r'^cmd_\S+ := (.*?)(?:;|$)', cmd_file.read_text(), re.M).group(1)
    argv = shlex.split(line)
    argv[1:1] = extra or []
    subprocess.run(argv, cwd=tree, check=True, capture_output=True)
    subprocess.run([sys.executable, '-m', 'objbtf', 'encode', obj], cwd=tree, check=True)
    link_vmlinux(tree, TMP_VMLINUX)


#: The reference kernel's modules.
MODULES = ('drivers/net/veth.ko', 'drivers/net/tun.ko', 'drivers/net/dummy.ko')


def module_links(build: Path, tree: Path, vmlinux_btf: Path, work: Path,
                 objbtf: list[str]) -> list[list[str]]:
    """Two commands, each giving every module its split BTF: objbtf link
    (on the encoded tree, against the BTF objbtf linked for vmlinux) and
    pahole -J --btf_base (on the stock tree, against its vmlinux), as
    Makefile.modfinal runs them; neither changes the module files."""
    ours = ' && '.join(shlex.join(objbtf + ['link', '--base', str(vmlinux_btf), '-o',
                                            str(work / 'm.btf'), str(tree / m)])
                       for m in MODULES)
    theirs = ' && '.join(shlex.join(['pahole', '-J', '--btf_gen_floats', '--lang_exclude=rust',
                                     '--btf_base', str(build / 'vmlinux'),
                                     '--btf_encode_detached', str(work / 'p.btf'),
                                     str(build / m)])
                         for m in MODULES)
    return [['sh', '-c', ours], ['sh', '-c', theirs]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--no-record', action='store_true')
    args = ap.parse_args()
    build = Path(subprocess.run(['bash', str(KERNEL_SCRIPT)], check=True, capture_output=True,
                                text=True).stdout.strip())
    objbtf = [sys.executable, '-m', 'objbtf']
    # Byte-compiled, as an installed objbtf is (pip compiles what it installs).
    subprocess.run([sys.executable, '-m', 'compileall', '-q', str(HERE.parent / 'objbtf'),
                    str(HERE.parent / 'linkdedup')], check=True)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        print('preparing an encoded copy of the kernel tree...', file=sys.stderr)
        tree = encoded_tree(build, work / 'build')
        out, cache, warm = work / 'out.btf', work / 'link.cache', work / 'warm.cache'
        pahole = ['pahole', '-J', '--btf_gen_floats', '--lang_exclude=rust',
                  '--btf_encode_detached', str(work / 'pahole.btf'), str(build / '.tmp_vmlinux.btf')]
        link = objbtf + ['link', '-o', str(out), str(tree / TMP_VMLINUX)]
        link_j1 = objbtf + ['link', '-j', '1', '-o', str(out), str(tree / TMP_VMLINUX)]
        bare = work / 'bare'
        subprocess.run(['objcopy', '--remove-section', '.BTF.objbtf', str(tree / TMP_VMLINUX),
                        str(bare)], check=True)
        bare_link = objbtf + ['link', '-o', str(out), str(bare)]
        cached_link = objbtf + ['link', '--cache', str(cache), '-o', str(out),
                                str(tree / TMP_VMLINUX)]
        (p_wall, p_rss), (pj_wall, pj_rss), (o_wall, o_rss), (o1_wall, o1_rss) = interleaved(
            args.repeat, [pahole, pahole[:1] + ['-j'] + pahole[1:], link, link_j1])
        (b_wall, b_rss), (b1_wall, _), (p0_wall, _) = interleaved(
            args.repeat, [bare_link, bare_link[:4] + ['-j', '1'] + bare_link[4:], pahole])
        (m_wall, m_rss), (pm_wall, pm_rss) = interleaved(
            args.repeat, module_links(build, tree, out, work, objbtf))
        subprocess.run(cached_link, check=True, capture_output=True)
        shutil.copy(cache, warm)
        recompile(tree, 'kernel/fork.o')
        (body_wall, _), (p2_wall, _) = interleaved(args.repeat, [cached_link, pahole])
        replayed = 'replayed' in subprocess.run(cached_link, check=True, capture_output=True,
                                                text=True).stderr
        extra = work / 'extra.h'
        extra.write_text('struct objbtf_bench { int a; long b; };\n'
                         'struct objbtf_bench objbtf_bench_var __attribute__((used));\n')
        recompile(tree, 'kernel/fork.o', ['-include', str(extra)])
        # Each run starts from the cache of the link before the type edit.
        missing = ['sh', '-c', f'cp {warm} {cache} && exec "$@"', 'sh'] + cached_link
        (type_wall, _), (p3_wall, _) = interleaved(args.repeat, [missing, pahole])
    report = (f'pahole -J: {p_wall:.2f} s, {p_rss} MB; pahole -J -j: {pj_wall:.2f} s, {pj_rss} MB\n'
              f'objbtf link (-j {len(os.sched_getaffinity(0))}): {o_wall:.2f} s, {o_rss} MB; '
              f'-j 1: {o1_wall:.2f} s, {o1_rss} MB\n'
              f'objbtf / pahole: wall {o_wall / p_wall:.2f} (goal <= 0.5), '
              f'max RSS {o_rss / p_rss:.2f} (goal <= 1.0); against pahole -j: wall {o_wall / pj_wall:.2f}\n'
              f'without .BTF.objbtf (the link hashes): objbtf link {b_wall:.2f} s, {b_rss} MB, '
              f'= {b_wall / p0_wall:.2f} x pahole; -j 1: {b1_wall:.2f} s\n'
              f'modules ({len(MODULES)}, split BTF on vmlinux\'s, one after the other): objbtf link '
              f'{m_wall:.2f} s, {m_rss} MB; pahole -J --btf_base {pm_wall:.2f} s, {pm_rss} MB; '
              f'ratio {m_wall / pm_wall:.2f}\n'
              f'after a function-body edit (cache {"replayed" if replayed else "NOT replayed"}): '
              f'objbtf link {body_wall:.2f} s = {body_wall / p2_wall:.2f} x pahole (goal <= 0.2)\n'
              f'after a type edit (cache miss, full link): '
              f'objbtf link {type_wall:.2f} s = {type_wall / p3_wall:.2f} x pahole')
    print(report)
    if not args.no_record:
        with open(HERE / 'RESULTS.md', 'a') as f:
            f.write(f'\n## link, {time.strftime("%Y-%m-%d %H:%M")}\n\n'
                    f'`python3 bench/link_bench.py --repeat {args.repeat}` '
                    f'(median wall of {args.repeat} runs each, the tools taking turns; '
                    f'load average {os.getloadavg()[0]:.1f} at the end)\n\n```\n{report}\n```\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
