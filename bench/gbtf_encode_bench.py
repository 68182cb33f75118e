#!/usr/bin/env python3
"""The DWARF-less path's per-object step (objbtf encode on GCC's -gbtf
objects): its CPU in process, against another commit, and as a build runs it.

The sample: every Nth C object of the reference kernel, compiled again with
its saved Kbuild command as the DWARF-less build compiles it (``-g`` out,
``-gbtf`` in: testsupport/saved_commands.without_dwarf), into a scratch directory; their
compile CPU is measured once, for the encode/compile ratio.

- In process, A/B: with ``--against REV``, child processes take turns, round
  after round (A B, then B A), between this checkout and a git worktree of
  REV, each installed alike (a plain install in a virtual environment, as
  ``--server`` uses: compiled if the install compiles) and run by its
  environment's Python; without it, the checkout runs as it is
  (PYTHONPATH; ``-P``, or ``-c`` would put the working directory first).
  A child encodes every
  object once to warm up, then ``--reps`` times a fresh copy of each, and
  reports the CPU (user + system, ``time.process_time``) of each
  ``encode_path``.  Figures: the median over rounds of the summed per-object
  medians, and the best (the sum of each object's minimum over all rounds).
- As a build runs it (``--server``): the installed objbtf of each tree (a
  plain install in a virtual environment), one ``objbtf encode`` per object
  from the top of a scratch tree, without the server (OBJBTF_RESIDENT=0, one
  interpreter per object) and through the resident server with the bare
  client (``objbtf server command``); the CPU counted is the clients' plus the
  server's (resident_bench.run_phase: OBJBTF_SERVER_LOG), in turns too.

Appends the figures to bench/RESULTS.md with the command line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / 'testsupport')]
from encode_bench import objects, reference_kernel  # noqa: E402
from harness import record, turn_order  # noqa: E402
from saved_commands import compile_command, without_dwarf  # noqa: E402
from install import clean_env, installed_objbtf, quick_client  # noqa: E402
from resident_bench import child_cpu, run_phase  # noqa: E402

#: One child: encode every object once (warm-up), then ``reps`` times each,
#: printing the CPU of each call as JSON.
CHILD = r'''
import json, os, shutil, sys, tempfile, time
import objbtf
from objbtf.encode.object_file import encode_path
from objbtf.features import Features
features = Features()
reps, objs = int(sys.argv[1]), sys.argv[2:]
work = os.path.join(tempfile.mkdtemp(), 'o.o')
def once(path):
    shutil.copyfile(path, work)
    start = time.process_time()
    encode_path(work, features)
    return time.process_time() - start
for path in objs:
    once(path)
print(json.dumps({'code': objbtf.implementation(),
                  'times': [[once(path) for _ in range(reps)] for path in objs]}))
shutil.rmtree(os.path.dirname(work))
'''


def make_sample(build: Path, every: int, dest: Path) -> tuple[list[Path], float]:
    """The sample's objects, compiled for the DWARF-less build into ``dest``,
    and their compile CPU."""
    paths, cpu = [], 0.0
    for obj in objects(build)[::every]:
        out = dest / str(obj.relative_to(build)).replace('/', '__')
        cmd = compile_command(build, obj, out)
        if cmd is None:
            continue
        before = child_cpu()
        done = subprocess.run(without_dwarf(cmd), cwd=build, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        cpu += child_cpu() - before
        if done.returncode:
            raise SystemExit(f'{obj}: the -gbtf compile failed')
        paths.append(out)
    return paths, cpu


def in_process(runners: dict[str, tuple[str, dict[str, str]]], objs: list[Path], rounds: int,
               reps: int) -> tuple[dict, dict[str, str]]:
    """Per runner (a Python and its environment): (median over rounds of
    the summed per-object medians, sum of the per-object minima), in
    seconds; and which code each ran (``objbtf.implementation()``)."""
    code: dict[str, str] = {}
    sums: dict[str, list[float]] = {name: [] for name in runners}
    best: dict[str, list[float]] = {name: [float('inf')] * len(objs) for name in runners}
    names = list(runners)
    for r in range(rounds):
        for name in turn_order(names, r):
            python, env = runners[name]
            out = subprocess.run([python, '-P', '-c', CHILD, str(reps), *map(str, objs)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            child = json.loads(out)
            code[name], times = child['code'], child['times']
            sums[name].append(sum(statistics.median(t) for t in times))
            best[name] = [min(b, *t) for b, t in zip(best[name], times)]
            print(f'round {r + 1}/{rounds} {name}: {1000 * sums[name][-1] / len(objs):.1f} ms '
                  'per object', file=sys.stderr)
    return {name: (statistics.median(sums[name]), sum(best[name])) for name in runners}, code


def as_built(installs: dict[str, str], objs: list[Path], rounds: int, work: Path) -> dict:
    """Per install (its ``objbtf`` script) and way (one process per object,
    server): the median over rounds of the CPU per object, clients and
    server."""
    ways = {}
    for name, objbtf in installs.items():
        bare = quick_client(objbtf, clean_env())
        stop = [objbtf, 'server', 'stop']
        ways[name, 'process'] = ([objbtf], clean_env(OBJBTF_RESIDENT='0'), stop)
        ways[name, 'server'] = (bare, clean_env(OBJBTF_RESIDENT='1'), stop)
    figures: dict[tuple[str, str], list[float]] = {way: [] for way in ways}
    order = list(ways)
    scratch = work / 'tree'
    for r in range(rounds):
        for way in turn_order(order, r):
            cmd, env, stop = ways[way]
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            for obj in objs:
                shutil.copyfile(obj, scratch / obj.name)
            clients, server = run_phase(cmd, stop, env, scratch,
                                        [['encode', '-q', obj.name] for obj in objs])
            figures[way].append((clients + server) / len(objs))
    return {way: statistics.median(f) for way, f in figures.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=10, help='every Nth kernel object (default 10)')
    ap.add_argument('--rounds', type=int, default=6, help='rounds of turns (default 6)')
    ap.add_argument('--reps', type=int, default=3, help='encodes of each object per child (default 3)')
    ap.add_argument('--against', metavar='REV', help='also measure this commit (in process, A/B)')
    ap.add_argument('--server', action='store_true',
                    help='also measure installed objbtf per process and through the server')
    ap.add_argument('--build', type=Path, help='kernel O= tree (default: build-kernel.sh)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    build = args.build or reference_kernel()
    here = HERE.parent
    started, load = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        (work / 'sample').mkdir()
        objs, compile_cpu = make_sample(build, args.every, work / 'sample')
        trees = {'this': here}
        if args.against:
            against = work / 'against'
            subprocess.run(['git', '-C', str(here), 'worktree', 'add', '-q', '--detach',
                            str(against), args.against], check=True)
            trees['against'] = against
        try:
            lines = [f'{len(objs)} objects (every {args.every}th C object of {build}, compiled '
                     f'with -gbtf and no -g: {1000 * compile_cpu / len(objs):.0f} ms of compile '
                     f'CPU each); this checkout at {_rev(here)}'
                     + (f', against {args.against} at {_rev(trees["against"])}' if args.against
                        else '')]
            installs = ({name: installed_objbtf(tree, work / f'venv-{name}')
                         for name, tree in trees.items()}
                        if args.against or args.server else {})
            runners = {name: (str(Path(installs[name]).parent / 'python'), clean_env())
                       if args.against else
                       (sys.executable, {**clean_env(), 'PYTHONPATH': str(tree)})
                       for name, tree in trees.items()}
            ip, code = in_process(runners, objs, args.rounds, args.reps)
            lines.append(f'in process, encode_path CPU per object ({args.rounds} rounds in turns, '
                         f'{args.reps} encodes of each object per round):')
            for name, (med, best) in ip.items():
                lines.append(f'  {name:8} median {1000 * med / len(objs):6.1f} ms, best '
                             f'{1000 * best / len(objs):6.1f} ms  ({med / compile_cpu:.3f} of the '
                             f'compile; {code[name]})')
            if len(set(code.values())) > 1:
                lines.append('  (not alike: one side runs compiled modules, the other not)')
            if args.against:
                (m_this, b_this), (m_against, b_against) = ip['this'], ip['against']
                lines.append(f'  this / against: median {m_this / m_against:.2f}, best '
                             f'{b_this / b_against:.2f}')
            if args.server:
                built = as_built(installs, objs, max(2, args.rounds // 2), work)
                lines.append('as a build runs it, CPU per object (clients and server):')
                for (name, way), cpu in built.items():
                    lines.append(f'  {name:8} {way:8} {1000 * cpu:6.1f} ms  '
                                 f'({cpu * len(objs) / compile_cpu:.3f} of the compile)')
        finally:
            if args.against:
                subprocess.run(['git', '-C', str(here), 'worktree', 'remove', '--force',
                                str(trees['against'])], check=False)
    lines.append(f'wall {time.time() - started:.0f} s, load average {load:.1f} at the start, '
                 f'{os.getloadavg()[0]:.1f} at the end')
    report = '\n'.join(lines)
    print(report)
    if not args.no_record:
        record('DWARF-less per-object step (GCC BTF)', report)
    return 0


def _rev(tree: Path) -> str:
    return subprocess.run(['git', '-C', str(tree), 'rev-parse', '--short', 'HEAD'],
                          capture_output=True, text=True).stdout.strip()


if __name__ == '__main__':
    sys.exit(main())
