"""The compile jobs' own command lines, stock against objbtf, object by object.

compile_ab.py measures whole makes in turns of minutes; on this machine a
turn's drift is as large as the per-job cost it looks for.  This bench
pairs the variants per object instead: it runs each sampled object's saved
Kbuild command line (``.NAME.o.cmd``) as make would, in the tree, stock and
with the post-step Kbuild appends for ``OBJBTF`` (``; $(OBJBTF) encode -q
$(OBJBTF_FLAGS) $@``, through the quick client), one right after the
other, as many objects at once as ``--streams`` says (make -j's
neighbours: the server's encodes run beside other compiles).  Each turn
runs every object in both variants, A B on even turns and B A on odd ones.

Counted: each command line's CPU (wait4: the shell, the compiler,
objtool, the client) and the resident server's CPU over the turn (its
processes' /proc times), which only the objbtf commands cause.  Reported:
the CPU ratio of the two variants, server included, per turn and as the
harness's paired median; the objbtf command lines' extra CPU beyond the
server per object (mean and its 95 % interval over the objects' paired
differences: what compile_ab's turns could not resolve); the server's CPU
per encode.

Nothing is deleted: a tree built with objbtf or without serves, and each
object is left made by the command its ``.cmd`` file saved.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import (become_subreaper, cpu_mark, orphans, others_share,  # noqa: E402
                        others_since, run_rusage, settle_servers, subtree_cpu)
from compile_ab import directories, objects_in, tree_arguments  # noqa: E402
from harness import doubts, orders, paired_ratio, record, turn_order  # noqa: E402
from install import clean_env, installed_objbtf, quick_client  # noqa: E402
from saved_commands import saved_command  # noqa: E402

VARIANTS = ('stock', 'objbtf')
#: The post-step Kbuild appends to a compile for OBJBTF (scripts/Makefile.lib's
#: cmd_objbtf): the command, its flags, the object.
POST_STEP = re.compile(r' ; (\S+) encode -q (.*) (\S+)$')


def stock_line(saved: str) -> tuple[str, str | None]:
    """A saved compile line without objbtf's post-step, and the flags that
    post-step gave (None: the line has none)."""
    m = POST_STEP.search(saved)
    return (saved, None) if m is None else (saved[:m.start()], m.group(2))


def with_encode(stock: str, objbtf: str, flags: str, target: str) -> str:
    """``stock`` with the post-step Kbuild appends for ``OBJBTF=objbtf``."""
    return f'{stock} ; {objbtf} encode -q {flags} {target}'


@dataclass
class Job:
    target: str                         # as make names it, relative to the tree
    lines: dict[str, str]               # variant -> command line
    saved: str                          # the variant the tree's .cmd file holds
    made: str = ''                      # the variant that made the object last
    cpu: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VARIANTS})


@dataclass
class Turn:
    cpu: dict[str, float]               # variant -> the command lines' CPU
    server: float
    wall: float
    others: float


def jobs_of(build: Path, dirs: list[str], every: int, client: str, flags: str) -> list[Job]:
    jobs = []
    for obj in objects_in(build, dirs)[::every]:
        saved = saved_command(obj)
        assert saved is not None        # objects_in found its .cmd file
        stock, saved_flags = stock_line(saved)
        target = str(obj.relative_to(build))
        lines = {'stock': stock,
                 'objbtf': with_encode(stock, client, saved_flags if saved_flags is not None
                                       else flags, target)}
        jobs.append(Job(target, lines, 'stock' if saved_flags is None else 'objbtf'))
    return jobs


def run_lines(lines: list[str], build: Path, env: dict[str, str]) -> list[float]:
    """Run the command lines at once, in the tree, as make runs one (sh -c);
    the CPU of each.  One that fails ends the bench."""
    cpu = [0.0] * len(lines)
    failed: list[str] = []

    def one(i: int) -> None:
        status, cpu[i], err = run_rusage(['/bin/sh', '-c', lines[i]], build, env)
        if status != 0:
            failed.append(f'exit {status} of the line ending ...{lines[i][-160:]}: '
                          f'{err.strip()[-300:]}')

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(lines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        sys.exit(f'command_ab: in {build}: {failed[0]}')
    return cpu


def has_btf(obj: Path) -> bool:
    out = subprocess.run(['readelf', '-S', '-W', str(obj)], capture_output=True, text=True,
                         check=True).stdout
    return ' .BTF ' in out


def one_turn(turn: int, jobs: list[Job], streams: int, build: Path, env: dict[str, str],
             server: int) -> Turn:
    totals = {v: 0.0 for v in VARIANTS}
    server0, mark, t0 = subtree_cpu(server), cpu_mark(), time.monotonic()
    for at in range(0, len(jobs), streams):
        group = jobs[at:at + streams]
        for variant in turn_order(VARIANTS, turn):
            for job in group:
                job.made = variant
            for job, cpu in zip(group, run_lines([j.lines[variant] for j in group], build, env)):
                job.cpu[variant].append(cpu)
                totals[variant] += cpu
    wall = time.monotonic() - t0
    return Turn(totals, subtree_cpu(server) - server0, wall, others_since(mark))


def restore(jobs: list[Job], build: Path, env: dict[str, str]) -> None:
    """Make again, untimed, each object the bench left made otherwise than
    its .cmd file says (or half made, by a line that failed)."""
    for job in jobs:
        if job.made and job.made != job.saved:
            run_lines([job.lines[job.saved]], build, env)
        Path(build, job.target).with_name(f'.{Path(job.target).name}.d').unlink(missing_ok=True)


def report(turns: list[Turn], jobs: list[Job], dirs: list[str], streams: int) -> str:
    n = len(jobs)
    order = orders(len(turns))
    stock = [t.cpu['stock'] for t in turns]
    cpu = paired_ratio(stock, [t.cpu['objbtf'] + t.server for t in turns], order)
    # Per object: the mean over the turns of objbtf's line less stock's.
    extra = [statistics.mean(j.cpu['objbtf']) - statistics.mean(j.cpu['stock']) for j in jobs]
    mean = statistics.mean(extra)
    half = 1.96 * statistics.stdev(extra) / math.sqrt(n) if n > 1 else math.inf
    stock_median = statistics.median(statistics.mean(j.cpu['stock']) for j in jobs)
    server = [t.server / n for t in turns]
    others = others_share(sum(t.others for t in turns), sum(t.wall for t in turns))
    found = doubts(cpu, others)
    drift = stock[-1] / stock[0]
    lines = [f'{n} objects of {" ".join(dirs)}, {streams} at once, {len(turns)} turns '
             f'(each object A B, then B A, ...)']
    for i, t in enumerate(turns):
        lines.append(f'  turn {i}: stock {t.cpu["stock"]:.1f} s, objbtf {t.cpu["objbtf"]:.1f} s '
                     f'+ server {t.server:.2f} s, wall {t.wall:.0f} s')
    lines += [f'CPU, objbtf (server included) / stock: {cpu}',
              f"objbtf's command lines beyond the server, per object: {1000 * mean:+.1f} ms "
              f'(95 % interval {1000 * (mean - half):+.1f} to {1000 * (mean + half):+.1f}) '
              f'on a stock median of {1000 * stock_median:.0f} ms',
              f"the resident server's CPU per encode: median "
              f'{1000 * statistics.median(server):.1f} ms '
              f'({1000 * min(server):.1f} to {1000 * max(server):.1f})',
              f'drift: the last turn\'s stock lines took {drift:.2f} of the first\'s; others used '
              f'{100 * others:.1f} % of the machine']
    lines += [f'NOT TRUSTWORTHY: {d}' for d in found] or ['trustworthy by harness.py\'s rules']
    return '\n'.join(lines)


def main() -> int:
    ap = tree_arguments(__doc__, 'sampled')
    ap.add_argument('--every', type=int, default=3, help='every Nth object (default 3)')
    ap.add_argument('--turns', type=int, default=4, help='turns of both variants (default 4)')
    ap.add_argument('--streams', type=int, default=len(os.sched_getaffinity(0)),
                    help='objects at once, as make -j (default: the CPUs)')
    ap.add_argument('--flags', default='',
                    help="OBJBTF_FLAGS for a stock tree's lines (an objbtf tree's say theirs)")
    opts = ap.parse_args()
    dirs = directories(opts)
    build = opts.build.resolve()
    if not (build / '.config').exists():
        sys.exit(f'command_ab: {build} is not a configured O= tree (no .config)')
    become_subreaper()
    logs = opts.venv.parent / 'logs'
    logs.mkdir(exist_ok=True)
    server_log = logs / 'command_ab.server'
    server_log.unlink(missing_ok=True)
    env = clean_env(LC_ALL='C', OBJBTF_SERVER_LOG=str(server_log))
    objbtf = installed_objbtf(HERE.parent, opts.venv)
    client = shlex.join(quick_client(objbtf, env))
    jobs = jobs_of(build, dirs, opts.every, client, opts.flags)
    if not jobs:
        sys.exit(f'command_ab: {build} has no compiled objects under {", ".join(dirs)}')
    turns = []
    try:
        # Untimed: the first objbtf line starts the tree's server, whose
        # start is no object's; and it must leave the object with a .BTF.
        jobs[0].made = 'objbtf'
        run_lines([jobs[0].lines['objbtf']], build, env)
        if not has_btf(build / jobs[0].target):
            sys.exit(f'command_ab: {jobs[0].lines["objbtf"]!r} left {jobs[0].target} '
                     'without .BTF')
        servers = orphans()
        if len(servers) != 1:
            sys.exit(f'command_ab: expected the tree\'s one resident server, found pids '
                     f'{servers}')
        for i in range(opts.turns):
            turns.append(one_turn(i, jobs, opts.streams, build, env, servers[0]))
            t = turns[-1]
            print(f'turn {i}: stock {t.cpu["stock"]:.1f} s, objbtf {t.cpu["objbtf"]:.1f} s + '
                  f'server {t.server:.2f} s', file=sys.stderr, flush=True)
    finally:
        restore(jobs, build, env)
        settled = settle_servers([objbtf], build, env, server_log)
    if settled.problems:
        sys.exit(f'command_ab: {"; ".join(settled.problems)}')
    text = report(turns, jobs, dirs, opts.streams)
    print(text)
    if not opts.no_record:
        record('compile command lines A/B', text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
