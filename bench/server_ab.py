#!/usr/bin/env python3
"""Two commits of objbtf as Kbuild runs the per-object step, in turns.

For a change to what an encode costs outside ``encode_elf`` (which
``code_ab.py`` times in process): the command's own work, the collector,
the resident server's worker.  Each side is a plain install of one commit
(this checkout, and ``--against REV`` checked out into a git worktree) in a
virtual environment of its own, run through the quick client ``objbtf
server command`` prints, so each has its own resident server, as a build
tree would.  Every Nth kernel object is encoded by one side then the
other (the order alternating object by object and round by round), each
on a fresh copy; the CPU counted is the client's plus its server's
(accounting.tree_cpu: the servers are reparented to this process).  Both
sides must write the same bytes.  The report gives each side's CPU per
object per round, their medians, and the median and range of the
per-round ratios with bench/harness.py's doubts.

Appends the report to bench/RESULTS.md with the command line.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import become_subreaper, cpu_mark, others_share, others_since, tree_cpu  # noqa: E402
from encode_bench import reference_kernel  # noqa: E402
from install import clean_env, installed_objbtf, quick_client  # noqa: E402
from kernel_tree import objects  # noqa: E402
from harness import doubts, paired_ratio, record, turn_order  # noqa: E402

SIDES = ('against', 'this')


def encode_cpu(client: list[str], source: Path, work: Path, env: dict[str, str]) -> tuple[float, str]:
    """(CPU seconds, digest of the result) of encoding a fresh copy of ``source``."""
    shutil.copyfile(source, work)
    before = tree_cpu()
    subprocess.run([*client, 'encode', '-q', str(work)], env=env, check=True)
    cpu = tree_cpu() - before
    return cpu, hashlib.sha256(work.read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--against', required=True, help='the commit to compare this checkout with')
    ap.add_argument('--every', type=int, default=15, help='every Nth kernel object (default 15)')
    ap.add_argument('--rounds', type=int, default=4, help='rounds of turns (default 4)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    checkout = HERE.parent
    rev = subprocess.run(['git', 'rev-parse', '--short', args.against], cwd=checkout,
                         check=True, capture_output=True, text=True).stdout.strip()
    here = subprocess.run(['git', 'describe', '--always', '--dirty'], cwd=checkout,
                          check=True, capture_output=True, text=True).stdout.strip()
    build = reference_kernel(False)
    sample = objects(build)[::args.every]
    become_subreaper()
    env = clean_env()
    env.pop('OBJBTF_CACHE_DIR', None)
    with tempfile.TemporaryDirectory(prefix='objbtf-server-ab-') as d:
        tmp = Path(d)
        worktree = tmp / 'against'
        subprocess.run(['git', 'worktree', 'add', '-q', '--detach', str(worktree), rev],
                       cwd=checkout, check=True)
        try:
            clients = {
                'against': quick_client(installed_objbtf(worktree, tmp / 'venv-against'), env),
                'this': quick_client(installed_objbtf(checkout, tmp / 'venv-this'), env),
            }
            cpu, load, wall = run_rounds(clients, sample, tmp, env, args.rounds)
        finally:
            subprocess.run(['git', 'worktree', 'remove', '--force', str(worktree)],
                           cwd=checkout, check=False)
    report = summary(cpu, len(sample), args.every, rev, here, load, wall)
    print(report)
    if not args.no_record:
        record('server A/B', report)
    return 0


def run_rounds(clients: dict[str, list[str]], sample: list[Path], tmp: Path,
               env: dict[str, str], rounds: int) -> tuple[dict[str, list[float]], tuple, float]:
    """CPU seconds per object of each side, one figure per round; the load
    averages at the start and end and the other processes' share."""
    work = tmp / 'o.o'
    for side in SIDES:                  # each side's server started, untimed
        encode_cpu(clients[side], sample[0], work, env)
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    load = os.getloadavg()[0]
    start, mark = time.time(), cpu_mark()
    for r in range(rounds):
        sums = dict.fromkeys(SIDES, 0.0)
        for i, obj in enumerate(sample):
            digests = set()
            for side in turn_order(SIDES, i + r):
                seconds, digest = encode_cpu(clients[side], obj, work, env)
                sums[side] += seconds
                digests.add(digest)
            if len(digests) != 1:
                sys.exit(f'{obj}: the two sides wrote different bytes')
        for side in SIDES:
            cpu[side].append(sums[side] / len(sample))
        print(f'round {r + 1}: ' + ', '.join(f'{s} {1000 * cpu[s][-1]:.2f} ms' for s in SIDES),
              file=sys.stderr)
    wall = time.time() - start
    share = others_share(others_since(mark), wall)
    return cpu, (load, os.getloadavg()[0], share), wall


def summary(cpu: dict[str, list[float]], n: int, every: int, rev: str, here: str,
            load: tuple, wall: float) -> str:
    ratio = paired_ratio(cpu['against'], cpu['this'])
    lines = [f'{n} objects (every {every}th of the reference kernel), {len(cpu["this"])} rounds, '
             f'wall {wall:.0f} s; this checkout at {here}, against {rev}; '
             'both wrote the same bytes',
             'CPU per object (client and server), by round:']
    for side in SIDES:
        rounds = ' '.join(f'{1000 * x:.2f}' for x in cpu[side])
        lines.append(f'  {side:8} {rounds}   median {1000 * statistics.median(cpu[side]):.2f} ms')
    lines.append(f'this / against: {ratio}')
    found = doubts(ratio, load[2])
    lines.append('trustworthy' if not found else 'NOT trustworthy: ' + '; '.join(found))
    lines.append(f'load average {load[0]:.1f} at the start, {load[1]:.1f} at the end')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
