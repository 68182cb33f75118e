#!/usr/bin/env python3
"""What objbtf costs an object that ccache restores, against what the stock
build pays for it (the ccache hit), with and without objbtf's encode cache.

ccache restores only what the compiler wrote, so Kbuild's post-step
encodes every restored object again; OBJBTF_CACHE_DIR keeps the encodes
(objbtf/encode/cache.py).  Every Nth object of the reference kernel is
compiled through ccache once (its saved Kbuild command, gcc, output in a
scratch tree at the object's path) and encoded with the encode cache
(untimed: this fills both caches, and its compile CPU is the cold compile's
figure).  Then, object by object, in turns (A B C, then B C A, ...):

  - stock:          ``ccache gcc ...``, a hit;
  - objbtf:         that hit, then ``encode -q PATH`` from the scratch tree's
                    top, as Kbuild runs it (the client ``objbtf server
                    command`` prints), with OBJBTF_CACHE_DIR: a hit of the
                    encode cache;
  - objbtf, no cache: that hit, then the same encode without it.

CPU is user + system of every process started, the resident server's work
for each command included (accounting.py: tree_cpu; the server's start is
in the untimed pass).  It prints each variant's CPU per object and its
ratio to stock (over all objects, and the median per object), checks that
the encodes with and without the cache wrote the same bytes, and appends
the report to bench/RESULTS.md with the command.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import become_subreaper, settle_servers  # noqa: E402
from encode_bench import reference_kernel, timed  # noqa: E402
from install import clean_env, installed_objbtf, quick_client  # noqa: E402
from kernel_tree import objects  # noqa: E402
from saved_commands import compile_command  # noqa: E402
from harness import record, rotated  # noqa: E402

VARIANTS = ('stock', 'objbtf', 'objbtf, no cache')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=5, help='every Nth kernel object (default 5)')
    ap.add_argument('--rounds', type=int, default=3, help='turns per object (default 3)')
    ap.add_argument('--build', type=Path, help='kernel O= tree (default: build-kernel.sh)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    for tool in ('ccache', 'gcc'):
        if shutil.which(tool) is None:
            sys.exit(f'ccache_bench: {tool} is not installed (apt-get install {tool})')
    build = args.build or reference_kernel()
    become_subreaper()
    objbtf = installed_objbtf()
    start, load = time.time(), os.getloadavg()[0]
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as d:
        top = Path(d) / 'tree'
        log = Path(d) / 'server.log'
        env = clean_env(CCACHE_DIR=f'{d}/ccache', CCACHE_NOHASHDIR='1', OBJBTF_SERVER_LOG=str(log),
                        OBJBTF_RESIDENT_IDLE='600')
        cached = {**env, 'OBJBTF_CACHE_DIR': f'{d}/encode-cache'}
        client = quick_client(objbtf, env)
        jobs = []
        cold = 0.0
        for obj in objects(build)[::args.every]:
            rel = str(obj.relative_to(build))
            (top / rel).parent.mkdir(parents=True, exist_ok=True)
            cmd = compile_command(build, obj, top / rel)
            if cmd is None:
                continue
            compiled = timed(['ccache', *cmd], cwd=build, env=env)
            if compiled is None or timed([*client, 'encode', '-q', rel], cwd=top, env=cached) is None:
                continue
            cold += compiled
            jobs.append((rel, cmd))
        outputs: dict[str, dict[str, bytes]] = {v: {} for v in VARIANTS[1:]}
        for i, (rel, cmd) in enumerate(jobs):
            for turn in range(args.rounds):
                for variant in rotated(VARIANTS, i + turn):
                    (top / rel).unlink()
                    used = timed(['ccache', *cmd], cwd=build, env=env)
                    if variant != 'stock' and used is not None:
                        encoded = timed([*client, 'encode', '-q', rel], cwd=top,
                                        env=cached if variant == 'objbtf' else env)
                        used = None if encoded is None else used + encoded
                        outputs[variant][rel] = (top / rel).read_bytes()
                    cpu[variant].append(float('nan') if used is None else used)   # shows in the sums
            if sys.stderr.isatty():
                print(f'\r{i + 1}/{len(jobs)} {rel}'[:78].ljust(78), end='', file=sys.stderr)
        servers = settle_servers([objbtf], top, env, log)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    same = outputs['objbtf'] == outputs['objbtf, no cache']
    report = summary(cpu, len(jobs), cold, args, same, time.time() - start, load, servers.problems)
    print(report)
    if not args.no_record:
        record('ccache', report)
    return 0 if same else 1


def summary(cpu: dict[str, list[float]], n: int, cold: float, args: argparse.Namespace,
            same: bool, wall: float, load: float, problems: list[str]) -> str:
    stock = cpu['stock']
    lines = [f'{n} objects (every {args.every}th kernel object), {args.rounds} turns each, '
             f'wall {wall:.0f} s, load average {load:.1f} at the start, '
             f'{os.getloadavg()[0]:.1f} at the end; objbtf client through the resident server; '
             f'{"; ".join(problems) or "server accounting checked"}',
             f'cold compile (gcc through ccache, a miss): {1000 * cold / n:.0f} ms CPU per object',
             'CPU per object (the ccache hit, and objbtf\'s encode after it), and ratio to stock: '
             'over all objects; median of the per-object ratios']
    for variant, values in cpu.items():
        ratio = sum(values) / sum(stock)
        per_object = statistics.median(v / s for v, s in zip(values, stock) if s > 0)
        lines.append(f'  {variant:17} {1000 * sum(values) / len(values):6.1f} ms   {ratio:.2f} x stock'
                     f'   (median {per_object:.2f})   {sum(values) / len(values) / (cold / n):.3f} '
                     'of a cold compile')
    lines.append('the encodes with and without the encode cache wrote the same bytes' if same else
                 'NOT TRUSTWORTHY: the encodes with and without the encode cache differ')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
