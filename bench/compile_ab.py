"""The compile jobs of a built tree, stock against objbtf, in many alternating turns.

A full build of the distribution-sized kernel takes about half an hour on
two CPUs, and this machine's speed drifts by more than a tenth within an
hour: two or four turns of full builds cannot tell a 2 % difference from a
drift.  The compile jobs are most of a build's CPU, and every one of
objbtf's per-object steps is in them.  This bench makes the objects of a
few directories of one built tree again (``make DIR/`` after deleting
them), stock (``OBJBTF=``) and with objbtf, in turns A B, B A, ..., as
many as the time allows: each turn a few minutes, each variant's objects
the same, in the same tree.

Counted: the CPU of everything make starts and of the tree's resident
server (stopped and reaped after each objbtf turn, accounting.py), so that
the per-object step is counted where it runs.  Reported: CPU and wall,
objbtf against stock (harness.paired_ratio), the extra CPU a compile job
of objbtf's costs (per object, the paired difference), the server's CPU
per object on its own, and how much slower the second run of a turn was
than the first (this machine's order effect, which the alternating
cancels).  Kconfig reads OBJBTF, so the first make after the other
variant's configures the tree again: an untimed ``make prepare`` does it
before each measured make, and a measured make that configures the tree,
or compiles another number of objects than were deleted, ends the bench.

The tree: one of kbuild_bench's, for example its distribution-sized
configuration (``--config distro``), built with the integration (the
stock build of kbuild_bench is that, with ``OBJBTF=``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import (become_subreaper, cpu_mark, others_share, others_since,  # noqa: E402
                        settle_servers, tree_cpu)
from harness import doubts, orders, paired_ratio, record, turn_order  # noqa: E402
from install import clean_env, installed_objbtf  # noqa: E402
from kernel_tree import configured_with  # noqa: E402
from saved_commands import first_command  # noqa: E402

VARIANTS = ('stock', 'objbtf')
#: The directories whose objects the bench takes unless told others.
DIRS = ('kernel/', 'net/netfilter/')
#: Kbuild's quiet line for a compiled object.
COMPILED = '  CC '
#: Kbuild's quiet line for a configuration made again (syncconfig).
SYNC = '  SYNC '


@dataclass
class Turn:
    variant: str
    objects: int
    wall: float
    cpu: float
    server_cpu: float
    others: float


def objects_in(build: Path, dirs: list[str]) -> list[Path]:
    """The objects under ``dirs`` of ``build`` that a compile makes: those
    whose saved Kbuild command (``.NAME.o.cmd``, kept when the object is
    deleted) has ``-c``.  Not the modules' composites, which ``ld -r``
    makes of them, nor their ``.mod.o``, which only the modules' final
    link makes."""
    found = []
    for d in dirs:
        for cmd in sorted((build / d).rglob('.*.o.cmd')):
            obj = cmd.with_name(cmd.name[1:-len('.cmd')])
            if not obj.name.endswith('.mod.o') and '-c' in first_command(obj):
                found.append(obj)
    return found


def tree_arguments(doc: str, done: str) -> argparse.ArgumentParser:
    """The arguments of a bench on the objects of a built tree's
    directories (this one's, command_ab's); ``done``: what the bench does
    with those objects."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('build', type=Path, help='a built O= tree with the Kbuild integration')
    ap.add_argument('--dir', action='append', dest='dirs', metavar='DIR',
                    help=f'a directory of the tree whose objects are {done} (repeatable; '
                         f'default {" ".join(DIRS)})')
    ap.add_argument('--venv', type=Path, default=Path('/var/tmp/kbuild-bench/venv'),
                    help="where this checkout is installed for the bench (kbuild_bench's)")
    ap.add_argument('--no-record', action='store_true', help='print, do not append to RESULTS.md')
    return ap


def directories(opts: argparse.Namespace) -> list[str]:
    """The directories ``tree_arguments`` took, each ending in '/'."""
    return [d.rstrip('/') + '/' for d in opts.dirs or DIRS]


def make_args(build: Path, variant: str, objbtf: str) -> list[str]:
    """What the variant's makes take: the values Kconfig read when the tree
    was configured (pahole's version among them: another would configure
    the tree again and rebuild what depends on it), but objbtf's, which
    the variant sets."""
    kept = [a for a in configured_with(build) if not a.startswith(('OBJBTF=', 'OBJBTF_COMMAND='))]
    return [*kept, f'OBJBTF={objbtf}' if variant == 'objbtf' else 'OBJBTF=']


def make(build: Path, dirs: list[str], jobs: int, args: list[str], env: dict[str, str],
         log: Path) -> None:
    """``make DIRS`` in the tree, which must succeed."""
    with open(log, 'w') as out:
        status = subprocess.run(['make', '-C', str(build / 'source'), f'O={build}', f'-j{jobs}',
                                 *args, *dirs], stdout=out, stderr=subprocess.STDOUT,
                                env=env).returncode
    if status != 0:
        sys.exit(f'compile_ab: make {" ".join(args + dirs)} failed (exit {status}); see {log}')


def one_turn(variant: str, build: Path, dirs: list[str], jobs: int, objbtf: str,
             env: dict[str, str], log: Path) -> Turn:
    """Delete the objects of ``dirs`` and make them again; what it cost."""
    objects = objects_in(build, dirs)
    for o in objects:
        o.unlink(missing_ok=True)
    server_log = log.with_suffix('.server')
    server_log.unlink(missing_ok=True)
    run_env = dict(env, OBJBTF_SERVER_LOG=str(server_log))
    args = make_args(build, variant, objbtf)
    # Untimed: Kconfig read OBJBTF, so the first make after the other
    # variant's configures the tree again (syncconfig, seconds of CPU),
    # which would fall on the second variant of every turn.  The server
    # that make may start is stopped: the measured make starts its own.
    make(build, ['prepare'], jobs, args, run_env, log.with_suffix('.prepare'))
    settled = settle_servers([objbtf], build, run_env, server_log)
    if settled.problems:
        sys.exit(f'compile_ab: {variant}, before the turn: {"; ".join(settled.problems)}')
    server_log.unlink(missing_ok=True)
    cpu0, mark = tree_cpu(), cpu_mark()
    t0 = time.monotonic()
    make(build, dirs, jobs, args, run_env, log)
    wall = time.monotonic() - t0
    servers = settle_servers([objbtf] if variant == 'objbtf' else None, build, run_env, server_log)
    if servers.problems:
        sys.exit(f'compile_ab: {variant}: {"; ".join(servers.problems)}')
    cpu = tree_cpu() - cpu0 - servers.stop_cpu
    lines = log.read_text().splitlines()
    if any(line.startswith(SYNC) for line in lines):
        sys.exit(f'compile_ab: {variant}: the measured make configured the tree again; see {log}')
    compiled = sum(line.startswith(COMPILED) for line in lines)
    if compiled != len(objects):
        sys.exit(f'compile_ab: {variant}: make compiled {compiled} objects where {len(objects)} '
                 f'were deleted (a changed configuration rebuilds more); see {log}')
    return Turn(variant, len(objects), wall, cpu, servers.cpu, others_since(mark))


def report(turns: list[list[Turn]], dirs: list[str]) -> str:
    """The report: each turn, the ratios, the extra CPU per job, the doubts."""
    by = {v: [next(t for t in turn if t.variant == v) for turn in turns] for v in VARIANTS}
    order = orders(len(turns))
    cpu = paired_ratio([t.cpu for t in by['stock']], [t.cpu for t in by['objbtf']], order)
    wall = paired_ratio([t.wall for t in by['stock']], [t.wall for t in by['objbtf']], order)
    n = by['stock'][0].objects
    extra = [1000 * (o.cpu - s.cpu) / n for s, o in zip(by['stock'], by['objbtf'])]
    server = [1000 * o.server_cpu / n for o in by['objbtf']]
    others = others_share(sum(t.others for turn in turns for t in turn),
                          sum(t.wall for turn in turns for t in turn))
    found = doubts(cpu, others)
    first = [by[v][0].cpu for v in VARIANTS]
    last = [by[v][-1].cpu for v in VARIANTS]
    drift = statistics.mean(last) / statistics.mean(first)
    second = statistics.median(turn[1].cpu / turn[0].cpu for turn in turns)
    share = sum(t.server_cpu for t in by['objbtf']) / sum(t.cpu for t in by['stock'])
    lines = [f'{n} objects of {" ".join(dirs)}, {len(turns)} turns (A B, then B A, ...)']
    for i, turn in enumerate(turns):
        lines.append(f'  turn {i}: ' + ', '.join(
            f'{t.variant} CPU {t.cpu:.1f} s wall {t.wall:.1f} s' for t in turn))
    lines += [f'CPU,  objbtf / stock: {cpu}',
              f'wall, objbtf / stock: {wall}',
              f"objbtf's extra CPU per compile job: median {statistics.median(extra):.1f} ms "
              f'({min(extra):.1f} to {max(extra):.1f}); the resident server\'s CPU alone: median '
              f'{statistics.median(server):.1f} ms per object, {100 * share:.1f} % of the stock '
              f'turns\' CPU',
              f'order: the variant run second in a turn took a median {second:.3f} of the first\'s '
              f'CPU',
              f'drift: the last turn took {drift:.2f} of the first turn\'s CPU; others used '
              f'{100 * others:.1f} % of the machine']
    lines += [f'NOT TRUSTWORTHY: {d}' for d in found] or ['trustworthy by harness.py\'s rules']
    return '\n'.join(lines)


def main() -> int:
    ap = tree_arguments(__doc__, 'made again')
    ap.add_argument('--turns', type=int, default=6, help='turns of both variants (default 6)')
    ap.add_argument('-j', '--jobs', type=int, default=len(os.sched_getaffinity(0)))
    opts = ap.parse_args()
    dirs = directories(opts)
    build = opts.build.resolve()
    if not (build / 'source' / 'Makefile').exists() or not (build / '.config').exists():
        sys.exit(f'compile_ab: {build} is not a configured O= tree (no source link or .config)')
    missing = [d for d in dirs if not objects_in(build, [d])]
    if missing:
        sys.exit(f'compile_ab: {build} has no objects under {", ".join(missing)}: build it first')
    become_subreaper()
    objbtf = installed_objbtf(HERE.parent, opts.venv)
    env = clean_env(LC_ALL='C')
    logs = opts.venv.parent / 'logs'
    logs.mkdir(exist_ok=True)
    # Untimed: whatever an earlier make left half done or configured
    # otherwise is made now, not in the first turn.
    make(build, dirs, opts.jobs, make_args(build, 'stock', objbtf), env, logs / 'compile_ab-warm.log')
    turns = []
    for i in range(opts.turns):
        turn = []
        for variant in turn_order(VARIANTS, i):
            t = one_turn(variant, build, dirs, opts.jobs, objbtf, env,
                         logs / f'compile_ab-{i}-{variant}.log')
            print(f'turn {i} {variant}: {t.objects} objects, CPU {t.cpu:.1f} s, '
                  f'wall {t.wall:.1f} s', file=sys.stderr, flush=True)
            turn.append(t)
        turns.append(turn)
    text = report(turns, dirs)
    print(text)
    if not opts.no_record:
        record('compile jobs A/B', text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
