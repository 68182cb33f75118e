#!/usr/bin/env python3
"""The vmlinux link's CPU under two revisions of objbtf, in turns, on the reference kernel.

Each revision encodes its own copy of the reference kernel's build tree
(tests/kernel_tree.py: every object encoded, then linked as
scripts/link-vmlinux.sh links .tmp_vmlinux.btf), since the revisions may
write other chunk formats; a copy is kept in WORK and made again only
when the revision's encoder changes.  Then ``link()`` runs on each tree in
turns (A B, B A, ...), each run a fresh process that imports objbtf first
and times only the link (user + system, its -j workers included): the
cost a resident server's child pays.  The two revisions must give the
same BTF, byte for byte.

Reported: the median CPU of each, the median of the paired ratios B/A
with their range, and why not to trust them (bench/trust.py).  Appended
to bench/RESULTS.md with the command, unless --no-record.

    python3 bench/link_ab.py --a main --repeat 7
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from accounting import machine_cpu, own_cpu  # noqa: E402
from results import record  # noqa: E402
from trust import doubts, paired_ratio  # noqa: E402

KERNEL_BUILD = Path(os.environ.get('OBJBTF_KERNEL_DIR', '/var/cache/objbtf/kernel-6.1')) / 'build'

#: Made in a fresh process with a revision's code: the encoded tree.
ENCODE = '''
import sys
from pathlib import Path
code, build, dest = sys.argv[1:4]
sys.path[:0] = [code, code + '/tests']
from kernel_tree import encoded_tree
encoded_tree(Path(build), Path(dest))
'''

#: One timed link, in a fresh process with a revision's code; prints its CPU.
LINK = '''
import os, resource, sys
code, tree, out, jobs = sys.argv[1:5]
sys.path.insert(0, code)
from linkdedup.pipeline import link
from objbtf.features import Features
from kernel_tree import TMP_VMLINUX
def cpu():
    return sum(getattr(resource.getrusage(who), f) for who in
               (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ('ru_utime', 'ru_stime'))
os.chdir(tree)
start = cpu()
link(TMP_VMLINUX, features=Features(), output=out, jobs=int(jobs))
print(cpu() - start)
'''


def describe(rev: str) -> str:
    """``rev`` with its commit, for the record."""
    if rev == '.':
        return 'this checkout'
    commit = subprocess.run(['git', '-C', str(HERE.parent), 'rev-parse', '--short', rev],
                            check=True, capture_output=True, text=True).stdout.strip()
    return f'{rev} ({commit})'


def checkout(rev: str, dest: Path) -> Path:
    """The files of ``rev`` (a git revision of this repository) in ``dest``;
    '.' is this checkout as it is."""
    if rev == '.':
        return HERE.parent
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(['git', '-C', str(HERE.parent), 'archive', rev],
                             check=True, capture_output=True).stdout
    subprocess.run(['tar', '-x', '-C', str(dest)], input=archive, check=True)
    return dest


def encoder_digest(code: Path) -> str:
    """What decides the encoded tree: the encoder's code."""
    h = hashlib.blake2b(digest_size=16)
    for src in sorted((code / 'objbtf').rglob('*.py')):
        h.update(str(src.relative_to(code)).encode() + src.read_bytes())
    return h.hexdigest()


def encoded(code: Path, tree: Path) -> Path:
    """``tree``, the kernel encoded by ``code``'s encoder, made if missing or stale."""
    stamp = tree / '.objbtf-encoder'
    digest = encoder_digest(code)
    if stamp.exists() and stamp.read_text() == digest:
        return tree
    subprocess.run(['rm', '-rf', str(tree)], check=True)
    subprocess.run([sys.executable, '-c', ENCODE, str(code), str(KERNEL_BUILD), str(tree)],
                   check=True, env={**os.environ, 'OBJBTF_RESIDENT': '0'})
    stamp.write_text(digest)
    return tree


def timed_link(code: Path, tree: Path, out: Path, jobs: int) -> float:
    env = {**os.environ, 'OBJBTF_RESIDENT': '0',
           'PYTHONPATH': os.pathsep.join([str(code), str(code / 'tests')])}
    r = subprocess.run([sys.executable, '-c', LINK, str(code), str(tree), str(out), str(jobs)],
                       check=True, capture_output=True, text=True, env=env)
    return float(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--a', default='main', help='the baseline revision (default main)')
    ap.add_argument('--b', default='.', help="the revision measured (default '.', this checkout)")
    ap.add_argument('--repeat', type=int, default=7, help='turns (default 7)')
    ap.add_argument('-j', '--jobs', type=int, default=1, help='the link\'s -j (default 1)')
    ap.add_argument('--work', type=Path, default=Path('/var/tmp/link-ab'))
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    if not (KERNEL_BUILD.parent / 'READY').exists():
        sys.exit(f'{KERNEL_BUILD.parent}: no READY file: build the reference kernel first')
    variants = {}
    for name, rev in (('A', args.a), ('B', args.b)):
        code = checkout(rev, args.work / f'code-{name}')
        variants[name] = (code, encoded(code, args.work / f'tree-{name}'),
                          args.work / f'out-{name}.btf')
    cpu = {'A': [], 'B': []}
    start_wall, start_machine, start_own = time.monotonic(), machine_cpu(), own_cpu()
    for turn in range(args.repeat):
        for name in ('AB' if turn % 2 == 0 else 'BA'):
            cpu[name].append(timed_link(*variants[name], args.jobs))
    children = sum(cpu['A']) + sum(cpu['B'])
    wall = time.monotonic() - start_wall
    others = (machine_cpu() - start_machine - (own_cpu() - start_own) - children) \
        / (wall * os.cpu_count())
    same = variants['A'][2].read_bytes() == variants['B'][2].read_bytes()
    ratio = paired_ratio(cpu['A'], cpu['B'])
    lines = [f'A {describe(args.a)}: {statistics.median(cpu["A"]):.3f} s   '
             f'B {describe(args.b)}: {statistics.median(cpu["B"]):.3f} s   B/A {ratio}   '
             f'({args.repeat} turns, -j {args.jobs})',
             'the same BTF, byte for byte' if same else 'THE BTF DIFFERS']
    lines += [f'not to be trusted: {d}' for d in doubts(ratio, max(others, 0.0))]
    print('\n'.join(lines))
    if not args.no_record:
        record('link A/B', '\n'.join(lines), ': the vmlinux link\'s CPU in process '
               '(user + system, workers included), in turns')
    return 0 if same else 1


if __name__ == '__main__':
    sys.exit(main())
