#!/usr/bin/env python3
"""objbtf link against pahole -J on the reference kernel, in one run.

pahole runs on the stock tree's pre-BTF vmlinux (.tmp_vmlinux.btf), as
link-vmlinux.sh runs it; objbtf link on an encoded copy of the same tree,
relinked as Kbuild would (tests/kernel_tree.py).  Each is run --repeat
times; the median wall time and the largest max RSS are reported, with
their ratios, and appended to bench/RESULTS.md.  A second figure: the link
again after one object was encoded anew (what an incremental build pays).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'tests'))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--no-record', action='store_true')
    args = ap.parse_args()
    build = Path(subprocess.run(['bash', str(KERNEL_SCRIPT)], check=True, capture_output=True,
                                text=True).stdout.strip())
    objbtf = [sys.executable, '-m', 'objbtf']
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        print('preparing an encoded copy of the kernel tree...', file=sys.stderr)
        tree = encoded_tree(build, work / 'build')
        out = work / 'out.btf'
        pahole = ['pahole', '-J', '--btf_gen_floats', '--lang_exclude=rust',
                  '--btf_encode_detached', str(work / 'pahole.btf'), str(build / '.tmp_vmlinux.btf')]
        link = objbtf + ['link', '-o', str(out), str(tree / TMP_VMLINUX)]
        (p_wall, p_rss), (pj_wall, pj_rss), (o_wall, o_rss) = interleaved(
            args.repeat, [pahole, pahole[:1] + ['-j'] + pahole[1:], link])
        # One object changes: it is encoded again and the temporary vmlinux relinked.
        changed = tree / 'kernel' / 'fork.o'
        subprocess.run(objbtf + ['encode', str(changed)], check=True)
        link_vmlinux(tree, TMP_VMLINUX)
        (i_wall, _), (p2_wall, _) = interleaved(args.repeat, [link, pahole])
    report = (f'pahole -J: {p_wall:.2f} s, {p_rss} MB; pahole -J -j: {pj_wall:.2f} s, {pj_rss} MB\n'
              f'objbtf link: {o_wall:.2f} s, {o_rss} MB\n'
              f'objbtf / pahole: wall {o_wall / p_wall:.2f} (goal <= 0.5), '
              f'max RSS {o_rss / p_rss:.2f} (goal <= 1.0); against pahole -j: wall {o_wall / pj_wall:.2f}\n'
              f'after one object changed: objbtf link {i_wall:.2f} s = {i_wall / p2_wall:.2f} x pahole '
              f'(goal <= 0.2)')
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
