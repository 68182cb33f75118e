#!/usr/bin/env python3
"""Record a make's jobs and what each waited for: the input of bench/replay.py.

    python3 bench/buildgraph.py -o GRAPH.jsonl [--meta variant=NAME] -- make -j2 ...
    python3 bench/buildgraph.py --overhead 400

A build is recorded by running make with ``SHELL=jobrec`` (bench/jobrec.c,
compiled on first use): make runs every recipe line as ``$(SHELL) -c
LINE``, and a command-line SHELL overrides the makefiles' and reaches every
sub-make through MAKEFLAGS (Linux's Makefiles set CONFIG_SHELL, never
SHELL).  jobrec logs each line's start, end, CPU (the line and its
descendants: wait4), working directory and command; the parent of each
line is the recipe line whose make ran it, so recursive makes and scripts
that run make (link-vmlinux.sh) nest.

What a job waited for is derived from the files Kbuild names, not from
time: a job writes the ``-o``/``--output`` file, the redirect targets and
the last operand of ``mv``/``cp``/``ln``/``install`` (filechk) of its
command, and, for a Kbuild command, the target whose ``.TARGET.cmd`` it
writes (a later line of the target appends to it); it reads the existing
files its command line names (and those an ``@FILE`` lists) and, from
that ``.cmd`` file, its ``source_`` and ``deps_`` lines (every header, the
generated ones included).  J waited for I when J read a file I was the last
to write before J started.  make orders only its own recipe lines, so the
edge is lifted to the two recipe lines of the make that holds both (a
compile that reads a header ``prepare`` wrote waits, with its whole
descent, for the prepare step); where the recording contradicts the lifted
edge, it stays between the two jobs.  Every edge goes from a job's end to
a later start on the one clock of the recording, so the graph has no
cycle.

Kbuild orders some steps without one reading a file the other wrote; those
are added as barriers, each named after the Makefile rule it stands for:

- ``prepare``: ``$(build-dirs): prepare`` (6.12: ``$(build-dir)``), every
  descent of the top Makefile's make (``Makefile.build obj=DIR ...
  need-builtin=1``) waits for the lines of that make that began before the
  first descent (a descent's own descents into subdirectories wait for
  nothing: Makefile.build starts them among its compiles);
- ``modpost``: ``vmlinux: ... modpost`` and ``modules: modpost``, the
  ``Makefile.vmlinux`` and ``Makefile.modfinal`` makes wait for
  ``Makefile.modpost``'s (which writes the ``.mod.c`` files by no name).

The graph is JSON lines: a ``{"graph": {...}}`` line (the make's command,
wall, -j, the recorder's own doubts), then one job a line, times in
seconds from make's start.  ``--part`` records of objbtf's commands inside a
line (OBJBTF_COMMAND wrapped by jobrec) give each job's ``parts``: the
replay's farm mode runs a compile's objbtf encode locally.
"""
from __future__ import annotations

import argparse
import bisect
import functools
import gzip
import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import harness
from accounting import cpu_mark, others_share, others_since

HERE = Path(__file__).resolve().parent
SOURCE = HERE / 'jobrec.c'
MAKES = ('make', 'gmake')
COMPILERS = re.compile(r'(^|-)(gcc|cc|clang)(-\d+)?$')
DOT_CMD = re.compile(r'^(.*/)?\.([^/]+)\.cmd$')
DESCENT = re.compile(r'Makefile\.build obj=\S+.*need-builtin=1')
#: The top Makefile's make (Kbuild runs it again in the O= directory).
TOP_MAKE = re.compile(r'-f \S*/Makefile(\s|$)')
#: (barrier, pattern of the waiting make, pattern of the make it waits for)
AFTER_MODPOST = [('modpost', re.compile(r'scripts/Makefile\.(vmlinux|modfinal)(\s|$)'),
                  re.compile(r'scripts/Makefile\.modpost(\s|$)'))]
#: How much of each command a graph keeps.
CMD_KEPT = 160
#: The longest gap from a job's end to the next start that is make's work (s).
LAUNCH_CAP = 0.02


@dataclass
class Job:
    """One recipe line as the replay takes it."""
    id: int
    parent: int | None
    start: float
    end: float
    cpu: float
    status: int
    cwd: str
    cmd: str
    kind: str = 'leaf'              # leaf, make (a recursive make) or script (runs one)
    compile: bool = False           # $(CC) -c: what a build farm runs remotely
    outputs: list[str] = field(default_factory=list)
    inputs: int = 0                 # how many existing files it names or its .cmd lists
    after: list[tuple[int, str]] = field(default_factory=list)   # (job, why)
    parts: dict[str, float] = field(default_factory=dict)       # command -> wall s

    @property
    def wall(self) -> float:
        return self.end - self.start


@dataclass
class Graph:
    meta: dict
    jobs: list[Job]


def wrapper(work: Path) -> Path:
    """jobrec, compiled into ``work`` (once per version of its source)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    exe = work / f'jobrec-{digest}'
    if not exe.exists():
        work.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_suffix('.tmp')
        subprocess.run(['gcc', '-O2', '-Wall', '-o', str(tmp), str(SOURCE)], check=True)
        tmp.rename(exe)
    return exe


def recording(exe: Path, log: Path, env: dict[str, str],
              objbtf_command: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The make arguments and environment that record a make into ``log``.
    ``objbtf_command``: the command Kbuild would run objbtf with (``objbtf
    server command``), whose calls are then recorded as parts of their
    lines; Kbuild takes a given OBJBTF_COMMAND as it is."""
    log.unlink(missing_ok=True)
    env = {k: v for k, v in env.items() if k not in ('JOBREC_PARENT', 'MAKEFLAGS', 'MFLAGS')}
    env.update(JOBREC_LOG=str(log), JOBREC_LEVEL=env.get('MAKELEVEL', '0'))
    args = [f'SHELL={exe}']
    if objbtf_command:
        args.append(f'OBJBTF_COMMAND={exe} --part objbtf {objbtf_command}')
    return args, env


def _unescape(text: str) -> str:
    return re.sub(r'\\([\\tn])', lambda m: {'\\': '\\', 't': '\t', 'n': '\n'}[m.group(1)], text)


#: A shell word (quoted parts, escapes and plain characters) or operator.
TOKEN = re.compile(r"""&&|\|\||>>|>&|[;&|()<>]|(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s'"\\;&|<>()])+""")
QUOTED = re.compile(r"""'([^']*)'|"((?:\\.|[^"\\])*)"|\\(.)""")


def _unquoted(m: re.Match) -> str:
    single, double, escaped = m.groups()
    if single is not None:
        return single
    return re.sub(r'\\(.)', r'\1', double) if double is not None else escaped


def _words(cmd: str) -> list[str]:
    """A command's shell words and operators, unquoted (shlex's, in C's time)."""
    return [QUOTED.sub(_unquoted, w) for w in TOKEN.findall(cmd)]


def _part_name(words: list[str]) -> str:
    """'objbtf encode' from the words of ``jobrec --part objbtf CLIENT... encode ...``."""
    return next((w for w in words[1:] if re.fullmatch(r'[a-z]+', w)), words[0])


def read_log(log: Path, t0_ns: int) -> list[Job]:
    """The jobs of a jobrec log, parts attached, times from ``t0_ns``."""
    ids: dict[str, int] = {}
    raw, parts = [], []
    for line in log.read_text(errors='replace').splitlines():
        f = line.split('\t')
        if len(f) != 10:
            continue
        (parts if f[0] == 'P' else raw).append(f)
    raw.sort(key=lambda f: int(f[3]))
    for f in raw:
        ids[f[1]] = len(ids)
    jobs = [Job(id=ids[f[1]], parent=ids.get(f[2]), start=(int(f[3]) - t0_ns) / 1e9,
                end=(int(f[4]) - t0_ns) / 1e9, cpu=(int(f[5]) + int(f[6])) / 1e6,
                status=int(f[7]), cwd=_unescape(f[8]), cmd=_unescape(f[9])) for f in raw]
    for f in parts:
        if f[2] in ids:
            words = _unescape(f[9]).split(' ')
            name = f'{f[1]} {_part_name(words)}'
            job = jobs[ids[f[2]]]
            job.parts[name] = job.parts.get(name, 0.0) + (int(f[4]) - int(f[3])) / 1e9
    return jobs


DEPS = re.compile(r'^(?:source|deps)_\S+\s*:=((?:[^\n]*\\\n)*[^\n]*)', re.M)


def _cmd_file_deps(path: str) -> list[str]:
    """The source_ and deps_ files a Kbuild ``.TARGET.cmd`` file lists."""
    try:
        text = Path(path).read_text(errors='replace')
    except OSError:
        return []
    return [w for m in DEPS.finditer(text) for w in m.group(1).split()
            if w != '\\' and not w.startswith('$(') and not w.endswith(')')]


#: Commands whose last operand is the file they write.
COPIES = ('mv', 'cp', 'ln', 'install')
#: Words that end a simple command.
SEPARATORS = {';', '&&', '||', '|', '&', '(', ')', '{', '}', 'then', 'do', 'else', 'fi', 'done'}


@functools.lru_cache(maxsize=1 << 18)
def _normalized(cwd: str, path: str) -> str:
    return os.path.normpath(os.path.join(cwd, path))


def _files(job: Job, words: list[str], is_file) -> tuple[list[str], list[str]]:
    """(outputs, inputs) of a job, as normalized paths."""
    def norm(p: str) -> str:
        return _normalized(job.cwd, p)

    outputs, cmd_files, appended, listed = [], [], [], []
    for i, w in enumerate(words[:-1]):
        nxt = words[i + 1]
        if not re.search(r'\w', nxt) or nxt.startswith(('&', '-', '/dev/')):
            continue
        if w in ('-o', '--output', '>', '>>'):
            outputs.append(norm(nxt))
            if w == '>>':                       # appends to what was written before
                appended.append(norm(nxt))
            m = DOT_CMD.match(nxt)
            if w != '-o' and m:                 # Kbuild's saved command: > dir/.target.cmd
                outputs.append(norm((m.group(1) or '') + m.group(2)))
                cmd_files.append(norm(nxt))
    outputs += [norm(w.split('=', 1)[1]) for w in words if w.startswith('--output=')]
    command: list[str] = []
    for w in [*words, ';']:                     # filechk's mv, a copy, a link
        if w in SEPARATORS:
            operands = [x for x in command[1:] if not x.startswith('-') and '>' not in x]
            if command and os.path.basename(command[0]) in COPIES and len(operands) > 1:
                outputs.append(norm(operands[-1]))
            command = []
        else:
            command.append(w)
    inputs = set()
    for w in words:
        w = w.split('=', 1)[1] if w.startswith('--') and '=' in w else w
        if w.startswith('@') and is_file(norm(w[1:])):    # a response file: it and its files
            listed.append(norm(w[1:]))
            continue
        if w.startswith('-') or not w or '=' in w or not re.search(r'[/.]', w):
            continue
        p = norm(w)
        if p not in outputs and is_file(p):
            inputs.add(p)
    for response in listed:
        inputs.add(response)
        inputs.update(p for p in map(norm, Path(response).read_text(errors='replace').split())
                      if is_file(p))
    for cmd_file in cmd_files:
        inputs.update(p for p in map(norm, _cmd_file_deps(cmd_file)) if p not in outputs)
    return outputs, sorted((inputs - set(outputs)) | set(appended))


def _ancestors(jobs: list[Job], j: int) -> list[int]:
    chain = [j]
    while (p := jobs[chain[-1]].parent) is not None:
        chain.append(p)
    return chain


def _lifted(jobs: list[Job], writer: int, reader: int) -> tuple[int, int] | None:
    """The recipe lines of the make that runs both ``writer`` and
    ``reader`` (at any depth), on their sides; None when one runs the other."""
    up_w, up_r = _ancestors(jobs, writer), _ancestors(jobs, reader)
    on_r = set(up_r)
    for a in up_w:
        if a in on_r:
            return None             # one job runs the other
        parent = jobs[a].parent
        if parent in on_r or parent is None:
            k = up_r.index(parent) if parent is not None else len(up_r)
            return (a, up_r[k - 1]) if k else None
    return None


def analyse(jobs: list[Job], meta: dict) -> Graph:
    """Kinds, files and edges of the recorded jobs."""
    children: dict[int | None, list[int]] = defaultdict(list)
    for job in jobs:
        children[job.parent].append(job.id)
    cache: dict[str, bool] = {}

    def is_file(p: str) -> bool:
        if p not in cache:
            cache[p] = os.path.isfile(p)
        return cache[p]

    readers: dict[int, list[str]] = {}
    writes: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for job in jobs:
        words = _words(job.cmd)
        first = next((w for w in words if w not in ('set', '-e', ';', '@', '+')
                      and not re.fullmatch(r'\w+=.*', w)), '')
        if children[job.id]:
            job.kind = 'make' if os.path.basename(first) in MAKES else 'script'
        outputs, inputs = _files(job, words, is_file)
        job.outputs, job.inputs = list(dict.fromkeys(outputs)), len(inputs)
        job.compile = (job.kind == 'leaf' and '-c' in words and any(o.endswith('.o') for o in outputs)
                       and any(COMPILERS.search(os.path.basename(w)) for w in words))
        readers[job.id] = inputs
        for out in job.outputs:
            writes[out].append((job.end, job.id))
    for w in writes.values():
        w.sort()
    unlifted = 0
    edges: dict[int, dict[int, str]] = defaultdict(dict)
    for job in jobs:
        for path in readers[job.id]:
            done = [j for end, j in writes.get(path, ()) if end <= job.start and j != job.id]
            if not done:
                continue
            writer = done[-1]
            pair = _lifted(jobs, writer, job.id)
            if pair is None:
                continue
            a, b = pair
            if jobs[a].end > jobs[b].start:     # the recording says otherwise
                a, b = writer, job.id
                unlifted += 1
            edges[b].setdefault(a, f'file {path}')
    added = _barriers(jobs, children, edges)
    for b, after in edges.items():
        jobs[b].after = sorted(after.items())
    meta = dict(meta, jobs=len(jobs), edges=sum(len(a) for a in edges.values()),
                unlifted_edges=unlifted, barrier_edges=added,
                compiles=sum(j.compile for j in jobs), launch=launch_time(jobs))
    return Graph(meta, jobs)


def launch_time(jobs: list[Job]) -> float:
    """make's time to start a job, which no job's record holds (make forks
    and execs jobrec, reaps it after its log line, reads and expands what
    comes next): the mean time from the last end of any job to each start,
    over the starts that followed one by less than LAUNCH_CAP.  A job starts
    when a slot frees or what it waited for ends, so most starts follow an
    end by about that; longer gaps are waits, and the gap before a make's
    first job is its parse, which the replay holds as the make's own."""
    ends = sorted(j.end for j in jobs)
    first: dict[int, Job] = {}
    for job in jobs:
        if job.parent is not None and (job.parent not in first or job.start < first[job.parent].start):
            first[job.parent] = job
    gaps = []
    for job in jobs:
        k = bisect.bisect_right(ends, job.start)
        if k and first.get(job.parent) is not job and job.start - ends[k - 1] < LAUNCH_CAP:
            gaps.append(job.start - ends[k - 1])
    return statistics.fmean(gaps) if gaps else 0.0


def _barriers(jobs: list[Job], children: dict[int | None, list[int]],
              edges: dict[int, dict[int, str]]) -> dict[str, int]:
    """Add Kbuild's barriers (module docstring); how many edges each added."""
    added: dict[str, int] = defaultdict(int)
    for parent, kids in children.items():
        top = parent is None or TOP_MAKE.search(jobs[parent].cmd)
        descents = [k for k in kids if top and DESCENT.search(jobs[k].cmd)]
        if descents:
            first = min(jobs[d].start for d in descents)
            for d in descents:
                for k in kids:
                    if k not in descents and jobs[k].start < first and jobs[k].end <= jobs[d].start:
                        if k not in edges[d]:
                            edges[d][k] = 'barrier prepare'
                            added['prepare'] += 1
        for name, waiter, waited in AFTER_MODPOST:
            for k in kids:
                if waiter.search(jobs[k].cmd):
                    for m in kids:
                        if waited.search(jobs[m].cmd) and jobs[m].end <= jobs[k].start \
                                and m not in edges[k]:
                            edges[k][m] = f'barrier {name}'
                            added[name] += 1
    return dict(added)


def write_graph(graph: Graph, path: Path) -> None:
    """The graph as JSON lines, gzipped when ``path`` ends in .gz: what the
    replay needs, each command cut to its first CMD_KEPT characters and
    outputs under the job's directory relative to it (jobrec's log beside
    the graph keeps the commands whole)."""
    with (gzip.open if path.suffix == '.gz' else open)(path, 'wt') as f:
        f.write(json.dumps({'graph': graph.meta}) + '\n')
        for job in graph.jobs:
            kept = dict(asdict(job), cmd=job.cmd[:CMD_KEPT],
                        outputs=[os.path.relpath(o, job.cwd) if o.startswith(job.cwd + '/') else o
                                 for o in job.outputs])
            f.write(json.dumps(kept) + '\n')


def read_graph(path: Path) -> Graph:
    with (gzip.open if path.suffix == '.gz' else open)(path, 'rt') as f:
        lines = [json.loads(line) for line in f if line.strip()]
    jobs = [Job(**{**d, 'after': [tuple(a) for a in d['after']]}) for d in lines[1:]]
    return Graph(lines[0]['graph'], jobs)


def record(cmd: list[str], out: Path, jobs: int, cwd: Path | None = None,
           env: dict[str, str] | None = None, meta: dict | None = None) -> Graph:
    """Run ``cmd`` (a make) recorded; its graph, also written to ``out``."""
    exe = wrapper(out.parent / '.jobrec')
    log = out.with_suffix('.log')
    args, env = recording(exe, log, dict(env or os.environ))
    mark = cpu_mark()
    t0 = time.monotonic_ns()
    status = subprocess.run([*cmd, *args], cwd=cwd, env=env).returncode
    wall = (time.monotonic_ns() - t0) / 1e9
    if status != 0:
        sys.exit(f'buildgraph: {shlex.join(cmd)} failed (exit {status})')
    graph = analyse(read_log(log, t0), dict(meta or {}, command=shlex.join(cmd), wall=wall,
                                            jobs_flag=jobs,
                                            others=others_share(others_since(mark), wall)))
    write_graph(graph, out)
    return graph


def overhead(n: int, work: Path) -> str:
    """make running ``n`` trivial recipe lines with /bin/sh and with jobrec,
    in turns: the recorder's cost per job."""
    work.mkdir(parents=True, exist_ok=True)
    exe = wrapper(work)
    (work / 'Makefile').write_text(
        f'all: {" ".join(f"t{i}" for i in range(n))}\n'
        + ''.join(f't{i}:\n\t@:;\n' for i in range(n)) + '.PHONY: all\n')
    walls: dict[str, list[float]] = {'sh': [], 'jobrec': []}
    for turn in range(6):
        for name in (('sh', 'jobrec') if turn % 2 == 0 else ('jobrec', 'sh')):
            args, env = recording(exe, work / 'log', dict(os.environ))
            args = [] if name == 'sh' else args[:1]
            t0 = time.monotonic()
            subprocess.run(['make', '-s', '-j1', '-C', str(work), *args], env=env, check=True)
            walls[name].append(time.monotonic() - t0)
    per_job = sorted((j - s) / n * 1000 for s, j in zip(walls['sh'], walls['jobrec']))
    return (f'{n} recipe lines (each "@:;", which make gives /bin/sh), make -j1, 6 turns: '
            f'jobrec adds {per_job[len(per_job) // 2]:.2f} ms a job (turns {per_job[0]:.2f} to '
            f'{per_job[-1]:.2f}); /bin/sh alone {1000 * min(walls["sh"]) / n:.2f} ms a job')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('-o', '--output', type=Path, help='the graph (JSON lines)')
    ap.add_argument('--overhead', type=int, metavar='N',
                    help='measure the recorder\'s cost per job on N trivial jobs, append it to '
                         'RESULTS.md and exit')
    ap.add_argument('--no-record', action='store_true', help='--overhead: do not append to RESULTS.md')
    ap.add_argument('--meta', action='append', default=[], metavar='KEY=VALUE',
                    help='kept in the graph: config, variant and step name it for replay.py')
    ap.add_argument('command', nargs='*', help='the make command line, after --')
    opts = ap.parse_args()
    if opts.overhead:
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            text = overhead(opts.overhead, Path(tmp))
        text += f'\nload average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end'
        print(text)
        if not opts.no_record:
            harness.record('build recorder overhead', text)
        return 0
    if not opts.command or not opts.output:
        ap.error('want -o GRAPH -- make ...')
    jobs = next((int(a[2:]) for a in opts.command if re.fullmatch(r'-j\d+', a)), 1)
    meta = dict(m.partition('=')[::2] for m in opts.meta)
    graph = record(opts.command, opts.output.resolve(), jobs, meta=meta)
    print(f'{len(graph.jobs)} jobs, {graph.meta["edges"]} edges, wall {graph.meta["wall"]:.2f} s: '
          f'{opts.output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
