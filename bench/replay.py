#!/usr/bin/env python3
"""A recorded build graph replayed by a list scheduler on N CPUs, and on a build farm.

    python3 bench/replay.py --from-records WORK/records-DATE.jsonl [MORE.jsonl...]
    python3 bench/replay.py GRAPH.jsonl...

The graphs come from bench/buildgraph.py (kbuild_bench.py --record-graph
records one per build).  Each job takes the wall time it took in the
recording (``--duration cpu``: its CPU, which misses the waits on I/O and
the resident server's share of objbtf's encode), plus make's time to
start a job, which each graph estimates (buildgraph.launch_time); it may
start when every job it waited for is done and a CPU is free; among the
ready jobs the scheduler takes them in the order make started them in the
recording (``--priority recorded``, make's own order) or the longest path
to the end first (``critical``).  A recursive make is its parse (its start to its
first job), then its jobs, then its end; a script that runs make
(link-vmlinux.sh) is its own work between its makes' jobs, in order; the
recorded make itself is its start to its first job, then its jobs, then
the time to its exit.

The farm (``--farm 8+64``, distcc or icecream): a compile's compiler runs on
one of the 64 remote CPUs, the rest of its line (objtool, objbtf's encode,
fixdep) and every other job on the 8 local ones.  The compiler's share is
the line less the objbtf parts recorded inside it; objtool and fixdep go
with the compiler (a little too much remote), the preprocessing distcc does
locally and the network are not modelled.

``--objbtf-free`` projects with objbtf's recorded parts (the encodes inside
the compiles, the links inside their lines) at no time: how far an
infinitely quick objbtf could move the build, the floor of a goal.

The rebuild after touching one .c is replayed from its own recorded
rebuild, not cut out of the full build's graph: the recording holds what
make really ran (the descents it walked, the links that the changed types
did or did not redo).

The projection replays the graphs recorded with the most CPUs (-j2).
Validation: the replay of those on J CPUs against the measured ``make
-jJ`` walls of the same configuration, variant and step (the records of
builds made with -j1 and -j2), with the spread of those repeated builds;
and the replay of each graph on its own -j against its own wall.  The
report, a table per CPU count, stock against each other variant, and a plot
(bench/replay.png, when matplotlib is installed) go to bench/RESULTS.md
unless --no-record.
"""
from __future__ import annotations

import argparse
import heapq
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from buildgraph import Graph, Job, read_graph
from harness import OTHERS_LIMIT, record

HERE = Path(__file__).resolve().parent
CPUS = (1, 2, 8, 32, 64, 128)
#: The farm's (local, remote) CPUs unless --farm.
FARM = (8, 64)
#: Where the plot puts the farm, right of the CPU counts.
FARM_X = 256
#: kbuild_bench.py's steps: a full build, rebuilds after touching a vmlinux
#: .c (--touch) and a module's (--touch-module).
STEPS = ('full', 'vmlinux', 'module')
#: How far (relative) a replayed wall may be from the measured one.
AIM = 0.05


@dataclass
class Dag:
    """Scheduling nodes: a duration, the pool of CPUs it runs on ('L'
    local, 'R' remote; None takes no CPU), successors, and the recorded
    time its work began (make's order)."""
    dur: list[float] = field(default_factory=list)
    pool: list[str | None] = field(default_factory=list)
    began: list[float] = field(default_factory=list)
    succ: list[list[int]] = field(default_factory=list)

    def node(self, dur: float, began: float, pool: str | None = 'L') -> int:
        self.dur.append(max(0.0, dur))
        self.pool.append(pool if dur > 0 else None)
        self.began.append(began)
        self.succ.append([])
        return len(self.dur) - 1

    def edge(self, a: int, b: int) -> None:
        self.succ[a].append(b)


def local_share(job: Job) -> float:
    """Seconds of a compile's line that stay local on a farm: objbtf's parts."""
    return sum(t for name, t in job.parts.items() if name.startswith('objbtf'))


def dag_of(graph: Graph, farm: bool = False, duration: str = 'wall',
           barriers: bool = True, objbtf_free: bool = False) -> Dag:
    """The scheduling nodes of a graph (module docstring); ``objbtf_free``:
    objbtf's recorded parts (its encodes, its links) take no time."""
    jobs = graph.jobs
    dag = Dag()
    kids: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        if job.parent is not None:
            kids[job.parent].append(job)
    entry: dict[int, int] = {}
    exit_: dict[int, int] = {}
    launch = graph.meta.get('launch', 0.0)

    def own(job: Job) -> float:
        """The job's time, make's time to start it included."""
        recorded = job.wall if duration == 'wall' else job.cpu
        return launch + (max(0.0, recorded - local_share(job)) if objbtf_free else recorded)

    for job in sorted(jobs, key=lambda j: j.start):
        inner = kids.get(job.id)
        if not inner:
            if farm and job.compile:
                local = 0.0 if objbtf_free else min(own(job), local_share(job))
                remote = dag.node(own(job) - local, job.start, 'R')
                rest = dag.node(local, job.end - local)
                dag.edge(remote, rest)
                entry[job.id], exit_[job.id] = remote, rest
            else:
                entry[job.id] = exit_[job.id] = dag.node(own(job), job.start)
        elif job.kind == 'make':
            first, last = min(k.start for k in inner), max(k.end for k in inner)
            entry[job.id] = dag.node(launch + first - job.start, job.start)
            exit_[job.id] = dag.node(job.end - last, last)
        else:
            entry[job.id] = dag.node(launch + inner[0].start - job.start, job.start)
            exit_[job.id] = dag.node(job.end - max(k.end for k in inner), inner[-1].end)
    top = [job for job in jobs if job.parent is None]
    if top:                     # the recorded make's own start and end
        start = dag.node(min(j.start for j in top), 0.0)
        end = dag.node(graph.meta['wall'] - max(j.end for j in top), max(j.end for j in top))
        for job in top:
            dag.edge(start, entry[job.id])
            dag.edge(exit_[job.id], end)
    for job in jobs:
        inner = kids.get(job.id)
        if inner and job.kind == 'make':
            for k in inner:
                dag.edge(entry[job.id], entry[k.id])
                dag.edge(exit_[k.id], exit_[job.id])
        elif inner:                              # a script: its makes' jobs in turn
            prev = entry[job.id]
            for a, b in zip(inner, inner[1:]):
                dag.edge(prev, entry[a.id])
                prev = dag.node(b.start - a.end, a.end)     # its own work between them
                dag.edge(exit_[a.id], prev)
            dag.edge(prev, entry[inner[-1].id])
            dag.edge(exit_[inner[-1].id], exit_[job.id])
        for before, why in job.after:
            if barriers or not why.startswith('barrier'):
                dag.edge(exit_[before], entry[job.id])
    return dag


def bottom_levels(dag: Dag) -> list[float]:
    """Each node's longest path to the end, its own duration included."""
    order = topological(dag)
    level = [0.0] * len(dag.dur)
    for n in reversed(order):
        level[n] = dag.dur[n] + max((level[s] for s in dag.succ[n]), default=0.0)
    return level


def topological(dag: Dag) -> list[int]:
    indeg = [0] * len(dag.dur)
    for s in dag.succ:
        for b in s:
            indeg[b] += 1
    todo = [n for n, d in enumerate(indeg) if d == 0]
    order = []
    while todo:
        n = todo.pop()
        order.append(n)
        for b in dag.succ[n]:
            indeg[b] -= 1
            if indeg[b] == 0:
                todo.append(b)
    if len(order) != len(dag.dur):
        raise ValueError('the graph has a cycle')
    return order


def schedule(dag: Dag, cpus: dict[str, int], priority: str = 'recorded') -> float:
    """The makespan of a list schedule of ``dag`` on ``cpus`` (pool ->
    count): whenever a CPU of a pool is free, the ready node of that pool
    that comes first (``priority``) starts on it."""
    if priority == 'critical':
        level = bottom_levels(dag)
        key = [(-level[n], dag.began[n]) for n in range(len(dag.dur))]
    else:
        key = [(dag.began[n], 0.0) for n in range(len(dag.dur))]
    indeg = [0] * len(dag.dur)
    for s in dag.succ:
        for b in s:
            indeg[b] += 1
    ready: dict[str, list] = {pool: [] for pool in cpus}
    free = dict(cpus)
    running: list[tuple[float, int]] = []
    instant = [n for n, d in enumerate(indeg) if d == 0]
    now, done = 0.0, 0

    def finish(n: int) -> None:
        nonlocal done
        done += 1
        for b in dag.succ[n]:
            indeg[b] -= 1
            if indeg[b] == 0:
                instant.append(b)

    while True:
        while instant:                          # ready: queue it, or done at once
            n = instant.pop()
            if dag.pool[n] is None:
                finish(n)
            else:
                heapq.heappush(ready[dag.pool[n]], (key[n], n))
        for pool, queue in ready.items():
            while queue and free[pool]:
                _, n = heapq.heappop(queue)
                free[pool] -= 1
                heapq.heappush(running, (now + dag.dur[n], n))
        if not running:
            break
        now, n = heapq.heappop(running)
        free[dag.pool[n]] += 1
        finish(n)
    if done != len(dag.dur):
        raise ValueError('the graph has a cycle, or a pool without CPUs')
    return now


_dags: dict[tuple[int, bool, str, bool, bool], tuple[Graph, Dag]] = {}


def replay(graph: Graph, cpus: int | tuple[int, int], priority: str = 'recorded',
           duration: str = 'wall', barriers: bool = True, objbtf_free: bool = False) -> float:
    """Wall seconds of ``graph`` on ``cpus`` CPUs, or (local, remote) farm CPUs
    (``objbtf_free``: ``dag_of``'s)."""
    farm = isinstance(cpus, tuple)
    key = (id(graph), farm, duration, barriers, objbtf_free)
    if key not in _dags or _dags[key][0] is not graph:
        _dags[key] = graph, dag_of(graph, farm, duration, barriers, objbtf_free)
    pools = {'L': cpus[0], 'R': cpus[1]} if isinstance(cpus, tuple) else {'L': cpus}
    return schedule(_dags[key][1], pools, priority)


@dataclass
class Recorded:
    """One recorded build: where it came from and its graph."""
    config: str
    variant: str
    step: str
    jobs: int               # make -jN
    wall: float             # measured by kbuild_bench (or the recorder)
    graph: Graph


def from_records(paths: list[Path]) -> list[Recorded]:
    """The recorded builds of kbuild_bench.py records files; a graph no
    longer where its record says is looked for beside the records."""
    found = []
    for path in paths:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        jobs = lines[0]['run']['jobs']
        for r in lines[1:]:
            if r.get('graph'):
                graph = Path(r['graph'])
                if not graph.exists():          # copied with its records (bench/graphs/)
                    graph = path.parent / graph.name
                found.append(Recorded(r['config'], r['variant'], r['step'], jobs, r['wall'],
                                      read_graph(graph)))
    return found


def from_graphs(paths: list[Path]) -> list[Recorded]:
    found = []
    for path in paths:
        g = read_graph(path)
        found.append(Recorded(g.meta.get('config', '-'), g.meta.get('variant', path.stem),
                              g.meta.get('step', 'full'), g.meta.get('jobs_flag', 1),
                              g.meta['wall'], g))
    return found


def grouped(builds: list[Recorded]) -> dict[tuple[str, str, str], list[Recorded]]:
    """The builds by (config, step, variant)."""
    groups: dict[tuple[str, str, str], list[Recorded]] = defaultdict(list)
    for b in builds:
        groups[b.config, b.step, b.variant].append(b)
    return groups


def projecting(runs: list[Recorded]) -> list[Graph]:
    """The graphs the projection replays: those recorded with the most CPUs
    (-j2 rather than the validation's -j1: their jobs shared the machine as
    on more CPUs)."""
    most = max(b.jobs for b in runs)
    return [b.graph for b in runs if b.jobs == most]


def width(builds: list[Recorded]) -> int:
    """The width of the configuration column."""
    return max(10, *(len(b.config) for b in builds))


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def validation(builds: list[Recorded], opts) -> tuple[list[str], list[str]]:
    """Lines comparing replays with measured walls, and the doubts."""
    out = ['Validation: the replay on J CPUs of the graphs the projection uses (those recorded with '
           'the most CPUs; median over them) against the measured make -jJ walls (median; spread = '
           'range / median over the repeated builds)',
           f'{"config":{width(builds)}} {"step":8} {"variant":8} {"J":>3} {"builds":>6} {"measured s":>10} '
           f'{"spread":>7} {"replay s":>9} {"error":>7} {"no barriers":>11} {"critical":>9}']
    doubts: list[str] = []
    for (config, step, variant), runs in grouped(builds).items():
        graphs = projecting(runs)
        for j in sorted({b.jobs for b in runs}):
            measured = [b.wall for b in runs if b.jobs == j]

            def med(**kw) -> float:
                return statistics.median(replay(g, j, duration=opts.duration, **kw) for g in graphs)

            m, r = statistics.median(measured), med(priority=opts.priority)
            error = r / m - 1
            out.append(f'{config:{width(builds)}} {step:8} {variant:8} {j:3} {len(measured):6} {m:10.1f} '
                       f'{100 * spread(measured):6.1f}% {r:9.1f} {100 * error:+6.1f}% '
                       f'{100 * (med(priority=opts.priority, barriers=False) / m - 1):+10.1f}% '
                       f'{100 * (med(priority="critical") / m - 1):+8.1f}%')
            allowed = max(AIM, spread(measured))
            if abs(error) > allowed:
                doubts.append(f'{config} {step} {variant} -j{j}: the replay is {100 * error:+.1f}% '
                              f'off the measured wall, more than '
                              + (f'the builds\' spread ({100 * spread(measured):.1f}%)'
                                 if allowed > AIM else f'the {100 * AIM:.0f}% aimed at'))
            if len(measured) < 2:
                doubts.append(f'{config} {step} {variant} -j{j}: one measured build, no spread to '
                              'judge the replay by')
        for want in (1, 2):
            if not any(b.jobs == want for b in runs):
                doubts.append(f'{config} {step} {variant}: no measured -j{want} build: '
                              f'the replay on {want} CPU{"s" if want > 1 else ""} is not validated')
    return out, doubts


def self_check(builds: list[Recorded], opts) -> list[str]:
    """Doubts from each graph's replay on its own -j against its own wall."""
    found = []
    for b in builds:
        r = replay(b.graph, b.jobs, opts.priority, opts.duration)
        gap = r / b.wall - 1
        if abs(gap) > AIM:
            found.append(f'{b.config} {b.step} {b.variant} (-j{b.jobs}, {b.wall:.1f} s): its own '
                         f'replay gives {r:.1f} s ({100 * gap:+.1f}%)')
        others = b.graph.meta.get('others', 0.0)
        if others > OTHERS_LIMIT:
            found.append(f'{b.config} {b.step} {b.variant} (-j{b.jobs}, {b.wall:.1f} s): other '
                         f'processes used {100 * others:.0f}% of the machine while it was recorded '
                         f'(limit {100 * OTHERS_LIMIT:.0f}%): its jobs\' times include waits for a CPU')
        if b.variant != 'stock' and not any(j.parts for j in b.graph.jobs if j.compile):
            found.append(f'{b.config} {b.step} {b.variant}: no objbtf command was recorded inside '
                         'its compiles: on the farm their encodes stay with the remote compiler')
        unlifted = b.graph.meta.get('unlifted_edges', 0)
        if unlifted:
            found.append(f'{b.config} {b.step} {b.variant}: {unlifted} file edges the recording '
                         'did not let be lifted to their makes (kept between the jobs)')
    return found


def projected(builds: list[Recorded], opts) -> dict[tuple[str, str, str], dict[str, float]]:
    """(config, step, variant) -> CPU column ('1' ... 'farm') -> median
    replayed wall of its ``projecting`` graphs."""
    table = {}
    for key, runs in grouped(builds).items():
        graphs = projecting(runs)
        row = {str(n): statistics.median(replay(g, n, opts.priority, opts.duration,
                                                objbtf_free=opts.objbtf_free) for g in graphs)
               for n in CPUS}
        row['farm'] = statistics.median(replay(g, opts.farm, opts.priority, opts.duration,
                                               objbtf_free=opts.objbtf_free) for g in graphs)
        table[key] = row
    return table


def table_lines(table: dict[tuple[str, str, str], dict[str, float]],
                farm: tuple[int, int]) -> list[str]:
    columns = [*map(str, CPUS), 'farm']
    w = max(10, *(len(c) for c, _, _ in table))
    out = [f'Projected wall s (replay, {"/".join(columns[:-1])} CPUs; farm: compiles on '
           f'{farm[1]} remote CPUs, the rest on {farm[0]} local), ratio to stock below each variant',
           'steps: full build; vmlinux, module: rebuild after touching a vmlinux .c, a module .c',
           f'{"config":{w}} {"step":8} {"variant":8}' + ''.join(f' {c:>7}' for c in columns)]
    for (config, step, variant), row in sorted(table.items(), key=stock_first):
        out.append(f'{config:{w}} {step:8} {variant:8}' + ''.join(f' {row[c]:7.1f}' for c in columns))
        base = table.get((config, step, 'stock'))
        if base and variant != 'stock':
            out.append(f'{"":{w}} {"":8} {"/stock":8}' + ''.join(f' {row[c] / base[c]:7.2f}'
                                                              for c in columns))
    return out


def stock_first(item: tuple[tuple[str, str, str], dict]) -> tuple:
    (config, step, variant), _ = item
    return config, STEPS.index(step) if step in STEPS else len(STEPS), step, variant != 'stock', variant


def plot(table: dict[tuple[str, str, str], dict[str, float]], farm: tuple[int, int],
         path: Path) -> str:
    """The table as a PNG; what was done, for the report."""
    try:
        import matplotlib
        import matplotlib.ticker
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return ('no plot: matplotlib is not installed (run replay.py with an interpreter that has '
                'it: docs/benchmarks.md)')
    configs = sorted({c for c, _, _ in table})
    steps = sorted({s for _, s, _ in table}, key=lambda s: (STEPS.index(s) if s in STEPS else 9, s))
    fig, axes = plt.subplots(len(configs), len(steps), figsize=(5 * len(steps), 4 * len(configs)),
                             squeeze=False)
    for ax, (config, step) in zip(axes.flat, [(c, s) for c in configs for s in steps]):
        for (c, s, variant), row in sorted(table.items(), key=stock_first):
            if (c, s) != (config, step):
                continue
            line, = ax.plot(CPUS, [row[str(n)] for n in CPUS], marker='o', label=variant)
            ax.scatter([FARM_X], [row['farm']], marker='*', s=120, color=line.get_color())
        ax.set(xscale='log', yscale='log', xlabel='CPUs', ylabel='replayed wall s',
               title=f'{config}: {step}')
        ax.set_xticks([*CPUS, FARM_X], [*map(str, CPUS), f'farm\n{farm[0]}+{farm[1]}'])
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f'plot: {path.relative_to(HERE.parent) if path.is_relative_to(HERE.parent) else path}'


def report(builds: list[Recorded], opts) -> str:
    order = 'longest path first' if opts.priority == 'critical' else "in make's recorded order"
    lines = [f'{len(builds)} recorded builds; each job takes its recorded {opts.duration} time, '
             f'the ready jobs are taken {order}']
    if opts.objbtf_free:
        lines.append("the projection with objbtf's recorded parts (its encodes inside the compiles, "
                     'its links) at no time (--objbtf-free): the floor of what objbtf\'s own speed '
                     'can change; the validation replays them as recorded')
    for b in builds:
        m = b.graph.meta
        lines.append(f'  {b.config} {b.step} {b.variant} -j{b.jobs}: {b.wall:.1f} s, {m["jobs"]} jobs '
                     f'({m["compiles"]} compiles, '
                     f'{sum(1 for j in b.graph.jobs if j.compile and j.parts)} with objbtf parts), '
                     f'make starts one in {1000 * m["launch"]:.1f} ms, {m["edges"]} edges (barriers: '
                     f'{", ".join(f"{k} {v}" for k, v in m["barrier_edges"].items()) or "none"})')
    checks, doubts = validation(builds, opts)
    table = projected(builds, opts)
    lines += ['', *checks, '', *table_lines(table, opts.farm), '', plot(table, opts.farm, opts.plot)]
    doubts += self_check(builds, opts)
    doubts += ['the replay leaves out make\'s own work between its jobs, I/O and memory '
               'bandwidth shared by more CPUs, and the speed-up of the link tools\' own threads '
               '(pahole -j, objbtf link -j) on more CPUs']
    lines += ['', 'Doubts:', *[f'  {d}' for d in doubts]]
    return '\n'.join(lines)


def farm_cpus(text: str) -> tuple[int, int]:
    """'8+64' -> (8, 64)."""
    local, _, remote = text.partition('+')
    try:
        return int(local), int(remote)
    except ValueError:
        raise argparse.ArgumentTypeError(f'want LOCAL+REMOTE CPUs, such as 8+64: {text!r}') from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('graphs', nargs='*', type=Path, help='graphs from bench/buildgraph.py')
    ap.add_argument('--from-records', nargs='+', type=Path, default=[], metavar='JSONL',
                    help='kbuild_bench.py records of runs with --record-graph')
    ap.add_argument('--priority', choices=('recorded', 'critical'), default='recorded')
    ap.add_argument('--duration', choices=('wall', 'cpu'), default='wall')
    ap.add_argument('--farm', type=farm_cpus, default=FARM, metavar='LOCAL+REMOTE',
                    help=f'the farm\'s CPUs (default {FARM[0]}+{FARM[1]})')
    ap.add_argument('--objbtf-free', action='store_true',
                    help="project with objbtf's recorded parts (encodes, links) at no time: "
                         "the floor of what objbtf's own speed can change")
    ap.add_argument('--plot', type=Path, default=HERE / 'replay.png')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    opts = ap.parse_args()
    builds = from_records(opts.from_records) + from_graphs(opts.graphs)
    if not builds:
        ap.error('no recorded build: give graphs or --from-records of a --record-graph run')
    text = report(builds, opts)
    print(text)
    if not opts.no_record:
        record('build replay', text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
