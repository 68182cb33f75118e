#!/usr/bin/env python3
"""Whole kernel builds with objbtf against the stock build (pahole), alternating.

One copy of the Linux source (--source: 6.1, the default, 6.12 or 7.2: the
tarball scripts/get-linux-source.sh gives, Debian's linux-source-VERSION),
patched with kbuild-integration/apply, and one O= build directory per variant and
configuration, all at the same path depth and name length
(WORK/VERSION/CONFIG/0, WORK/VERSION/CONFIG/1, ...), so that no variant's
strings are longer.
The variants:

  stock    make OBJBTF=                    the stock build, with pahole
  objbtf   make OBJBTF=<objbtf>            per-object BTF
  NAME     --variant 'NAME=MAKE ARGS'      any other, e.g. the DWARF-less build:
           --gbtf is --variant 'gbtf=OBJBTF={objbtf} OBJBTF_GBTF=1',
           --drop-dwarf --variant 'nodwarf=OBJBTF={objbtf} OBJBTF_DROP_DWARF=1'

Every variant gets ``PAHOLE=`` --pahole (default: the installed one; for
7.2 the newest, built from vendor/ by scripts/build-pahole.sh), whose
version the report names: the stock build's BTF step, and on 6.x what
chooses the features objbtf link is given.  ``{objbtf}`` in make arguments
is the objbtf under test: --objbtf-tree (default this checkout) installed
into WORK/venv, as a user installs it, and given as a user gives it (the
console script; the integration asks it once for its quick client,
docs/resident-server.md).  A variable the patched Kbuild never
mentions is refused (e.g. OBJBTF_GBTF before the DWARF-less switch
exists).  Each variant's make arguments also go to its ``configure``
(Kconfig may read them).

Configurations: ``reference`` (kbuild-integration/configs/reference.config,
as build-kernel.sh) and ``modules`` (plus modules.config: about 120 more
small modules), the default two; ``kallsyms`` (the reference plus
bench/kallsyms.config) and ``distro`` (x86_64 defconfig plus
bench/distro.config: BTF and some 800 modules, bench/distro_config.py), only
when asked for.  Steps, each ``make -jN VARIANT vmlinux modules``:

  full     from a freshly configured, empty O= directory
  vmlinux  after touching --touch (kernel/fork.c)
  module   after touching --touch-module (drivers/net/veth.c: a module in
           each configuration)

Every round runs, per configuration, one turn of full builds and --rebuilds
turns of each rebuild; a turn runs every variant once, each turn in the
reverse order of the one before (A B, B A, ...), so that a drift of the
machine's speed falls on all variants alike.  Each build records its wall
time, its CPU (user + system of every process it started, objbtf's resident
server included: see accounting.py), the size of its O= tree, the CPU other
processes used meanwhile, and its phases (compile, the vmlinux link chain,
the modules' final links: times of make's output lines) for the projection
to 8, 32 and 64 CPUs (docs/benchmarks.md).  Records go to WORK/records-DATE.jsonl as they
come; the report (medians, ratios to the first variant, whether each can be
trusted: harness.py) is printed and appended to --results with the command
line and the machine's state.  --from-records reports on an earlier run's
records, finished or not.

With --ccache every variant compiles with ``CC='ccache gcc'`` (one
CCACHE_DIR in WORK, shared: CCACHE_NOHASHDIR, since each variant builds in
its own directory), and objbtf keeps its encodes in OBJBTF_CACHE_DIR
(objbtf/encode/cache.py): a CI farm's setting.  An untimed full build of
each variant first fills both caches, so that every measured build finds
them warm.

With --record-graph every make runs with bench/jobrec.c as its SHELL,
which logs each recipe line (and objbtf's commands within them), and
WORK/logs/DATE-*.graph.jsonl.gz gets its graph, named in the build's record, for
bench/replay.py (docs/benchmarks.md); the recorder adds about 1.5 ms a job
to each build's wall and CPU (buildgraph.py --overhead).

About 25 minutes per round and configuration for two variants on 2 quiet
CPUs; far more on a shared machine, whose figures the report flags.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from buildgraph import analyse, read_log, recording, wrapper, write_graph
from accounting import (become_subreaper, cpu_mark, others_share, others_since, server_supported,
                        settle_servers, stop_servers, tree_cpu)
from install import clean_env, installed_objbtf, quick_client
from projection import PHASES, Phase, build_wall
from harness import (OTHERS_LIMIT, command_line, doubts, paired_ratio, pahole_version, record,
                     turn_order)

HERE = Path(__file__).resolve().parent
CONFIG_DIR = HERE.parent / 'kbuild-integration' / 'configs'
SOURCES = ('6.1', '6.12', '7.2')
CONFIGS = {'reference': (CONFIG_DIR / 'reference.config',),
           'modules': (CONFIG_DIR / 'reference.config', CONFIG_DIR / 'modules.config'),
           'kallsyms': (CONFIG_DIR / 'reference.config', HERE / 'kallsyms.config'),
           'distro': (HERE / 'distro.config',)}
#: The configurations whose fragments go on another base than tinyconfig.
BASES = {'distro': 'defconfig'}
DEFAULT_CONFIGS = ['reference', 'modules']
STEPS = ('full', 'vmlinux', 'module')
GBTF = 'gbtf=OBJBTF={objbtf} OBJBTF_GBTF=1'
DROP_DWARF = 'nodwarf=OBJBTF={objbtf} OBJBTF_DROP_DWARF=1'
#: Make variables of the stock Kbuild, which check_variables need not find.
STOCK_VARIABLES = ('PAHOLE', 'CC')
PROJECT_CPUS = (8, 32, 64)
#: Kbuild's quiet output: "  CC      kernel/fork.o", "  LD [M]  drivers/net/veth.ko".
COMMAND_LINE = re.compile(r'^  [A-Z][A-Z0-9_]*( \[M\])? +\S')
#: The first command of the vmlinux link chain (AR vmlinux.a in 6.1 and 6.12).
CHAIN_START = re.compile(r'\s(vmlinux\.a|vmlinux\.o|\.tmp_vmlinux\S*|vmlinux)$')
#: The modules' final links wait for vmlinux.
MODULE_FINAL = re.compile(r'\S\.ko$')


@dataclass
class Build:
    """One measured make."""
    config: str
    variant: str
    step: str
    round: int
    turn: int
    wall: float
    cpu: float
    tree_mb: float
    others_cpu: float
    load_before: float
    phases: dict[str, list[float]] = field(default_factory=dict)  # name -> [wall, cpu, commands]
    servers: dict = field(default_factory=dict)
    graph: str = ''             # --record-graph: its jobs (bench/buildgraph.py)
    btf: str = ''               # vmlinux's .BTF, its SHA-256: variants that must agree


def variants_from(specs: list[str], objbtf: str, pahole: str) -> dict[str, list[str]]:
    """NAME -> make arguments, stock first."""
    variants = {'stock': ['OBJBTF='], 'objbtf': [f'OBJBTF={objbtf}']}
    for spec in specs:
        name, sep, args = spec.partition('=')
        if not sep or not re.fullmatch(r'[A-Za-z0-9_-]+', name) or name in variants:
            sys.exit(f'kbuild_bench: --variant {spec!r}: want NEW_NAME=MAKE ARGS')
        variants[name] = [a.replace('{objbtf}', objbtf) for a in shlex.split(args)]
    # Every variant with the same pahole: on 6.x its version also chooses the
    # features objbtf link is given (scripts/pahole-flags.sh, Makefile.btf).
    return {name: [*args, f'PAHOLE={pahole}'] for name, args in variants.items()}


def check_variables(src: Path, variants: dict[str, list[str]]) -> None:
    """Every make variable a variant sets must be one the patched Kbuild reads."""
    for name, args in variants.items():
        for arg in args:
            var = arg.partition('=')[0]
            if var in STOCK_VARIABLES:
                continue
            found = subprocess.run(['grep', '-rqw', '--', var, 'Makefile', 'scripts', 'lib/Kconfig.debug',
                                    'init/Kconfig'], cwd=src)
            if found.returncode != 0:
                sys.exit(f'kbuild_bench: variant {name}: the Kbuild integration has no make '
                         f'variable {var} (has the change that adds it landed?)')


def source_tree(work: Path, integration: Path, version: str) -> Path:
    """WORK/linux-VERSION: Linux ``version`` with the integration applied,
    reused while the patches are the same."""
    src = work / f'linux-{version}'
    patches = sorted((integration / f'linux-{version}').glob('*.patch'))
    digest = hashlib.sha256(b''.join(p.read_bytes() for p in patches)).hexdigest()
    stamp = work / f'linux-{version}.patches'
    if src.is_dir() and stamp.exists() and stamp.read_text() == digest:
        return src
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    tarball = subprocess.run([str(HERE.parent / 'scripts' / 'get-linux-source.sh'), version],
                             check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run(['tar', '-xf', tarball, '-C', str(src), '--strip-components=1'], check=True)
    subprocess.run([str(integration / 'apply'), str(src)], check=True, stdout=subprocess.DEVNULL)
    stamp.write_text(digest)
    return src


def configure(integration: Path, src: Path, build: Path, config: str, args: list[str]) -> None:
    """An empty O= directory, configured with the configuration's fragments
    in order; the variant's make arguments go to configure's makes too
    (Kconfig may read them)."""
    shutil.rmtree(build, ignore_errors=True)
    base = ['--base', BASES[config]] if config in BASES else []
    subprocess.run([str(integration / 'configure'), *base, str(src), str(build),
                    *map(str, CONFIGS[config]), *args],
                   check=True, env=clean_env(), stdout=subprocess.DEVNULL)


def vmlinux_btf_digest(build: Path) -> str:
    """The SHA-256 of the build's vmlinux .BTF section ('' without one)."""
    out = build / '.kbuild-bench.btf'
    r = subprocess.run(['objcopy', '-O', 'binary', '--only-section=.BTF', str(build / 'vmlinux'),
                        str(out)], capture_output=True)
    if r.returncode != 0 or not out.exists():
        return ''
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    out.unlink()
    return digest


def tree_mb(build: Path) -> float:
    out = subprocess.run(['du', '-s', '-B1', str(build)], check=True, capture_output=True,
                         text=True).stdout
    return int(out.split()[0]) / 1e6


class Timeline:
    """Phases of one make, from the times of its output lines."""

    def __init__(self, log):
        self.log = log
        self.start = time.monotonic()
        self.marks: list[tuple[str, float, float]] = [('compile', 0.0, 0.0)]  # phase, t, cpu
        self.commands = {name: 0 for name in PHASES}

    def line(self, text: str, cpu0: float) -> None:
        now = time.monotonic() - self.start
        self.log.write(f'{now:9.2f} {text}\n')
        current = self.marks[-1][0]
        if current == 'compile' and CHAIN_START.search(text):
            self.marks.append(('link', now, tree_cpu() - cpu0))
        if current != 'modules' and MODULE_FINAL.search(text):
            self.marks.append(('modules', now, tree_cpu() - cpu0))
        if COMMAND_LINE.match(text):
            self.commands[self.marks[-1][0]] += 1

    def phases(self, wall: float, cpu: float) -> dict[str, list[float]]:
        ends = self.marks[1:] + [('', wall, cpu)]
        return {name: [round(e_t - t, 3), round(e_cpu - c, 3), self.commands[name]]
                for (name, t, c), (_, e_t, e_cpu) in zip(self.marks, ends)}


class BuildFailed(Exception):
    pass


@dataclass(frozen=True)
class Recorder:
    """--record-graph: jobrec as make's SHELL, and the command Kbuild runs
    objbtf with (an objbtf variant's), recorded as parts of its lines."""
    exe: Path
    objbtf_command: str | None
    meta: dict


def timed_make(src: Path, build: Path, jobs: int, args: list[str], env: dict[str, str],
               objbtf_cmd: list[str] | None, log: Path,
               recorder: Recorder | None = None) -> tuple[float, float, float, dict, dict, str]:
    """(wall, CPU, others' CPU, phases, servers, graph) of one make, which
    must succeed; the graph (its path) when ``recorder``."""
    if objbtf_cmd is not None:              # no server left from an earlier run serves this one
        stop_servers(objbtf_cmd, build, env)
    server_log = log.with_suffix('.server')
    server_log.unlink(missing_ok=True)
    env = dict(env, OBJBTF_SERVER_LOG=str(server_log))
    jobs_log = log.with_suffix('.jobs')
    if recorder is not None:
        rec_args, env = recording(recorder.exe, jobs_log, env, recorder.objbtf_command)
        args = [*args, *rec_args]
    cpu0, mark = tree_cpu(), cpu_mark()
    with open(log, 'w', buffering=1) as out, open(log.with_suffix('.err'), 'w') as err:
        timeline = Timeline(out)
        t0_ns = time.monotonic_ns()
        if recorder is not None and recorder.objbtf_command and objbtf_cmd is not None:
            # What Kbuild does when it asks for OBJBTF_COMMAND, which the
            # recording gives it: start the tree's server early.
            subprocess.run([*objbtf_cmd, 'server', 'command', '--start'], cwd=build, env=env,
                           stdout=subprocess.DEVNULL, check=True)
        proc = subprocess.Popen(['make', '-C', str(src), f'O={build}', f'-j{jobs}', *args,
                                 'vmlinux', 'modules'], stdout=subprocess.PIPE, stderr=err,
                                env=env)
        for raw in proc.stdout:
            timeline.line(raw.decode(errors='replace').rstrip('\n'), cpu0)
        status = proc.wait()
        wall = time.monotonic() - timeline.start
    if status != 0:
        raise BuildFailed(f'make in {build} failed (exit {status}); see {log.with_suffix(".err")}')
    servers = settle_servers(objbtf_cmd, build, env, server_log)
    cpu = tree_cpu() - cpu0 - servers.stop_cpu
    others = others_since(mark)
    graph = ''
    if recorder is not None:
        graph = str(log.with_suffix('.graph.jsonl.gz'))
        meta = dict(recorder.meta, wall=wall, jobs_flag=jobs, command=' '.join(args),
                    others=others_share(others, wall))
        write_graph(analyse(read_log(jobs_log, t0_ns), meta), Path(graph))
        with open(jobs_log, 'rb') as f, gzip.open(f'{jobs_log}.gz', 'wb') as out:
            shutil.copyfileobj(f, out)          # tens of MB a kernel build: kept compressed
        jobs_log.unlink()
    return wall, cpu, others, timeline.phases(wall, cpu), servers.as_dict(), graph


def machine_state(objbtf_tree: Path, jobs: int, pahole: str) -> str:
    def first_line(cmd: list[str]) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True)
        return (r.stdout or r.stderr).splitlines()[0] if r.returncode == 0 else 'missing'

    with open('/proc/cpuinfo') as f:
        model = next((line.split(':', 1)[1].strip() for line in f if line.startswith('model name')), '?')
    with open('/proc/meminfo') as f:
        mem = int(f.readline().split()[1]) / 2**20
    commit = first_line(['git', '-C', str(objbtf_tree), 'describe', '--always', '--dirty'])
    return (f'{len(os.sched_getaffinity(0))} CPUs ({model}), {mem:.0f} GB, Linux {platform.release()}; '
            f'make -j{jobs}; nice {os.nice(0)}; load average at start '
            f'{" ".join(f"{x:.2f}" for x in os.getloadavg())}; {first_line(["gcc", "--version"])}; '
            f'stock pahole {pahole} {first_line([pahole, "--version"])}; '
            f'objbtf from {objbtf_tree} at {commit}')


def run(opts, work: Path, records: Path) -> dict:
    """Run every build; the run's description for the report."""
    integration = opts.objbtf_tree / 'kbuild-integration'
    objbtf = installed_objbtf(opts.objbtf_tree, work / 'venv')
    env = clean_env(LC_ALL='C')
    resident = server_supported([objbtf], env)
    added = [GBTF] if opts.gbtf else []
    added += [DROP_DWARF] if opts.drop_dwarf else []
    variants = variants_from(opts.variant + added, objbtf, opts.pahole)
    if opts.without:
        variants = {name: args for name, args in variants.items() if name not in opts.without}
    if opts.ccache:
        if shutil.which('ccache') is None:
            sys.exit('kbuild_bench: --ccache needs ccache (apt-get install ccache)')
        env.update(CCACHE_DIR=str(work / 'ccache'), CCACHE_NOHASHDIR='1',
                   OBJBTF_CACHE_DIR=str(work / 'encode-cache'))
        variants = {name: [*args, 'CC=ccache gcc'] for name, args in variants.items()}
    src = source_tree(work, integration, opts.source)
    check_variables(src, variants)
    objbtf_cmd = [objbtf] if resident else None
    exe = wrapper(work / 'jobrec') if opts.record_graph else None
    client = (shlex.join(quick_client(objbtf, env)) if resident else objbtf) if exe else None

    def recorders(name: str, config: str, step: str, turn: int) -> Recorder | None:
        """--record-graph: the recording of one build."""
        if exe is None:
            return None
        with_objbtf = any(a.startswith('OBJBTF=') and a != 'OBJBTF=' for a in variants[name])
        return Recorder(exe, client if with_objbtf else None,
                        {'source': opts.source, 'config': config, 'variant': name, 'step': step,
                         'turn': turn})
    described = {'machine': machine_state(opts.objbtf_tree, opts.jobs, opts.pahole),
                 'command': command_line(),
                 'peer': pahole_version(opts.pahole),
                 'variants': {name: shlex.join(args) for name, args in variants.items()},
                 'source': opts.source, 'resident': resident, 'jobs': opts.jobs,
                 'touch': opts.touch, 'touch_module': opts.touch_module,
                 'records': str(records), 'ccache': opts.ccache,
                 'record_graph': opts.record_graph}
    records.write_text(json.dumps({'run': described}) + '\n')
    (work / 'logs').mkdir(exist_ok=True)
    # Named by the run too: another run's builds would overwrite its logs and
    # graphs, and a replay of both runs copied into one folder finds each.
    stamp = records.stem.removeprefix('records-')
    names = list(variants)
    failed: set[str] = set()
    if opts.ccache:
        warm_caches(opts, work, src, integration, variants, env, objbtf_cmd)
    for rnd in range(opts.rounds):
        for config in opts.config:
            builds = {name: work / opts.source / config / str(i) for i, name in enumerate(names)}
            turns = {'full': 1, 'vmlinux': opts.rebuilds, 'module': opts.rebuilds}
            for step in STEPS:
                for k in range(turns[step]):
                    turn = rnd * turns[step] + k
                    if step == 'full':
                        for name in names:
                            configure(integration, src, builds[name], config, variants[name])
                    else:
                        os.utime(src / (opts.touch if step == 'vmlinux' else opts.touch_module))
                    for name in turn_order(names, turn):
                        log = (work / 'logs'
                               / f'{stamp}-{opts.source}-{config}-{step}-{turn}-{name}.log')
                        if name in failed:
                            continue
                        load = os.getloadavg()[0]
                        try:
                            wall, cpu, others, phases, servers, graph = timed_make(
                                src, builds[name], opts.jobs, variants[name], env, objbtf_cmd, log,
                                recorders(name, config, step, turn))
                        except BuildFailed as err:    # the other variants go on
                            failed.add(name)
                            print(f'kbuild_bench: variant {name} dropped: {err}', file=sys.stderr)
                            with open(records, 'a') as f:
                                f.write(json.dumps({'failed': name, 'why': str(err)}) + '\n')
                            continue
                        b = Build(config, name, step, rnd, turn, round(wall, 3), round(cpu, 3),
                                  round(tree_mb(builds[name]), 1), round(others, 3), load,
                                  phases, servers, graph, vmlinux_btf_digest(builds[name]))
                        print(f'{config} {step} turn {turn} {name}: wall {wall:.1f} s, '
                              f'CPU {cpu:.1f} s, others {others:.1f} s', file=sys.stderr)
                        with open(records, 'a') as f:
                            f.write(json.dumps(asdict(b)) + '\n')
    return described


def warm_caches(opts, work: Path, src: Path, integration: Path, variants: dict[str, list[str]],
                env: dict[str, str], objbtf_cmd: list[str] | None) -> None:
    """--ccache: one untimed full build of each variant and configuration,
    in its own directory, so that the measured ones find the caches warm."""
    for config in opts.config:
        for i, (name, args) in enumerate(variants.items()):
            build = work / opts.source / config / str(i)
            print(f'{config} warming the caches: {name}', file=sys.stderr)
            configure(integration, src, build, config, args)
            timed_make(src, build, opts.jobs, args, env, objbtf_cmd,
                       work / 'logs' / f'{opts.source}-{config}-warm-{name}.log')


def read_records(path: Path) -> tuple[dict, list[Build]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    described = dict(lines[0]['run'], failed=[r for r in lines[1:] if 'failed' in r])
    return described, [Build(**r) for r in lines[1:] if 'failed' not in r]


def report(described: dict, builds: list[Build]) -> str:
    """The figures, ratios to the first variant, trust and projection."""
    names = list(described['variants'])
    cpus = len(os.sched_getaffinity(0))
    out = []
    for config in CONFIGS:
        mine = [b for b in builds if b.config == config]
        if not mine:
            continue
        base = f'{BASES[config]} + ' if config in BASES else ''
        out.append(f'Linux {described.get("source", "6.1")}, {config} configuration '
                   f'({base}{" + ".join(f.name for f in CONFIGS[config])}), make -j{described["jobs"]} '
                   f'vmlinux modules; {names[0]} with {described.get("peer", "pahole 1.24")}; '
                   f'medians, ratios to {names[0]} per turn: median (range)')
        out.append(f'{"step":8} {"variant":8} {"turns":>5} {"wall s":>8} {"CPU s":>8} {"tree MB":>8} '
                   f'{"others":>7}  {"wall ratio":>16} {"CPU ratio":>16} {"size":>5}')
        verdicts, projection, loaded = [], [], []
        for step in STEPS:
            by_name = {n: sorted((b for b in mine if b.step == step and b.variant == n),
                                 key=lambda b: b.turn) for n in names}
            base = by_name[names[0]]
            if not base:
                continue
            for name in names:
                runs = by_name[name]
                if not runs:
                    continue
                others = sum(b.others_cpu for b in runs) / sum(b.wall * cpus for b in runs)
                line = (f'{step:8} {name:8} {len(runs):5} {med(runs, "wall"):8.1f} '
                        f'{med(runs, "cpu"):8.1f} {med(runs, "tree_mb"):8.0f} {100 * others:6.0f}%')
                paired = [(b, o) for b in base for o in runs if o.turn == b.turn]
                if name != names[0] and paired:
                    ratios = {key: paired_ratio([getattr(b, key) for b, _ in paired],
                                                [getattr(o, key) for _, o in paired],
                                                [b.turn % 2 for b, _ in paired])
                              for key in ('wall', 'cpu', 'tree_mb')}
                    line += (f'  {str(ratios["wall"]):>16} {str(ratios["cpu"]):>16} '
                             f'{ratios["tree_mb"].median:5.2f}')
                    both = [x for pair in paired for x in pair]
                    share = sum(b.others_cpu for b in both) / sum(b.wall * cpus for b in both)
                    for key in ('wall', 'cpu'):
                        why = doubts(ratios[key], share)
                        verdicts.append(f'{step} {key} {name}/{names[0]} {ratios[key].median:.2f}: '
                                        + ('NOT trustworthy: ' + '; '.join(why) if why else 'trustworthy'))
                out.append(line)
                problems = sorted({p for b in runs for p in b.servers.get('problems', [])})
                served = [b.servers for b in runs if b.servers.get('processes')]
                if served:
                    out.append(f'{"":17} resident server: {statistics.median(s["cpu"] for s in served):.1f} s '
                               f'CPU (logged {statistics.median(s["logged_cpu"] for s in served):.1f} s), '
                               f'{statistics.median(s["requests"] for s in served):.0f} requests per build')
                out += [f'{"":17} server accounting: {p}' for p in problems]
                projection.append((step, name, median_phases(runs)))
                if others > OTHERS_LIMIT:
                    loaded.append(f'{step} {name} ({100 * others:.0f}%)')
        agreement = btf_agreement(mine, names)
        if agreement:
            out += ['', agreement]
        out += ['', 'Can the ratios be trusted (bench/harness.py)?']
        out += [f'  {v}' for v in verdicts] or ['  no ratio: no turn has measured two variants yet']
        out += ['', 'Projected wall s on N CPUs (docs/benchmarks.md), from the medians of each phase: '
                    'c(ompile), l(ink chain), m(odules)']
        if described['jobs'] > 1:
            out += projection_table(projection, names, described['jobs'])
        else:
            out.append('  none: the projection needs builds made with -j2 or more')
        if loaded:
            out.append('NOT trustworthy: other processes used the machine during ' + ', '.join(loaded)
                       + '; waiting makes a phase look serial (docs/benchmarks.md)')
        out.append('')
    out += [f'variant {r["failed"]} dropped: {r["why"]}' for r in described.get('failed', [])]
    return '\n'.join(out).rstrip()


def btf_agreement(builds: list[Build], names: list[str]) -> str:
    """Which variants made vmlinux's .BTF byte for byte alike ('=' joins
    them), over all their builds; '' when no build recorded it."""
    digests = {n: {b.btf for b in builds if b.variant == n and b.btf} for n in names}
    groups: dict[str, list[str]] = {}
    varying = []
    for name in names:
        if len(digests[name]) == 1:
            groups.setdefault(next(iter(digests[name])), []).append(name)
        elif digests[name]:
            varying.append(f'{name} (not the same in all its builds)')
    if not groups and not varying:
        return ''
    return 'vmlinux .BTF, byte for byte: ' + '; '.join([' = '.join(g) for g in groups.values()]
                                                      + varying)


def med(runs: list[Build], key: str) -> float:
    return statistics.median(getattr(b, key) for b in runs)


def median_phases(runs: list[Build]) -> dict[str, Phase]:
    """Each phase's median wall, CPU and command count over the runs."""
    phases = {}
    for p in PHASES:
        got = [b.phases[p] for b in runs if p in b.phases]
        if got:
            phases[p] = Phase(*(statistics.median(x[i] for x in got) for i in range(3)))
    return phases


def projection_table(rows: list[tuple[str, str, dict[str, Phase]]], names: list[str],
                     jobs: int) -> list[str]:
    out = [f'{"step":8} {"variant":8} {"phases: wall/CPU s":>30} {"sum":>7}'
           + ''.join(f' {f"N={n}":>7}' for n in PROJECT_CPUS)]
    walls: dict[tuple[str, str], list[float]] = {}
    for step, name, phases in rows:
        if not phases:
            continue
        shown = ' '.join(f'{name[0]} {short(p.wall)}/{short(p.cpu)}' for name, p in phases.items())
        walls[step, name] = [build_wall(phases, jobs, n) for n in PROJECT_CPUS]
        out.append(f'{step:8} {name:8} {shown:>30} {sum(p.wall for p in phases.values()):7.1f}'
                   + ''.join(f' {w:7.1f}' for w in walls[step, name]))
    for (step, name), w in walls.items():
        base = walls.get((step, names[0]))
        if name != names[0] and base:
            out.append(f'{step:8} {f"{name}/{names[0]}":17} {"":>30}'
                       + ''.join(f' {a / b:7.2f}' for a, b in zip(w, base)))
    return out


def short(seconds: float) -> str:
    return f'{seconds:.0f}' if seconds >= 10 else f'{seconds:.1f}'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--source', choices=SOURCES, default=SOURCES[0],
                    help='the Linux version built (default %(default)s)')
    ap.add_argument('--config', action='append', choices=list(CONFIGS),
                    help=f'configuration to build (repeatable; default: {" and ".join(DEFAULT_CONFIGS)})')
    ap.add_argument('--rounds', type=int, default=3, help='rounds (default 3)')
    ap.add_argument('--rebuilds', type=int, default=2,
                    help='turns of each rebuild step per round (default 2)')
    ap.add_argument('-j', '--jobs', type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument('--touch', default='kernel/fork.c', help='vmlinux source touched for the vmlinux step')
    ap.add_argument('--touch-module', default='drivers/net/veth.c',
                    help='module source touched for the module step')
    ap.add_argument('--pahole', default='pahole', metavar='PATH',
                    help='the stock build\'s pahole (its make variable PAHOLE; the kernel '
                         'chooses its flags by its version); for 7.2 the newest, built from '
                         'vendor/ by scripts/build-pahole.sh (default: the installed one)')
    ap.add_argument('--variant', action='append', default=[], metavar="'NAME=MAKE ARGS'",
                    help='another variant ({objbtf} is the objbtf under test)')
    ap.add_argument('--gbtf', action='store_true', help=f"add the DWARF-less build: --variant '{GBTF}'")
    ap.add_argument('--drop-dwarf', action='store_true',
                    help=f"add the DWARF build that drops each object's DWARF once encoded: "
                         f"--variant '{DROP_DWARF}'")
    ap.add_argument('--ccache', action='store_true',
                    help="every variant with CC='ccache gcc', objbtf with OBJBTF_CACHE_DIR, "
                         'both caches warmed by an untimed build first')
    ap.add_argument('--without', action='append', default=[], choices=['objbtf', 'stock'],
                    help='leave a default variant out (e.g. --gbtf --without objbtf: the '
                         'DWARF-less build against the stock one alone, in half the time; '
                         '--without stock: objbtf\'s builds alone, with --record-graph for a '
                         'replay beside another run\'s stock graphs; its ratios are to itself)')
    ap.add_argument('--record-graph', action='store_true',
                    help='record every build\'s jobs and what each waited for (bench/buildgraph.py), '
                         'for bench/replay.py; allows -j1')
    ap.add_argument('--objbtf-tree', type=Path, default=HERE.parent,
                    help='checkout whose objbtf and kbuild-integration are measured (default: this one)')
    ap.add_argument('--work', type=Path, default=Path('/var/tmp/kbuild-bench'),
                    help='work directory, kept for reruns (default /var/tmp/kbuild-bench)')
    ap.add_argument('--results', type=Path, default=HERE / 'RESULTS.md',
                    help='file the report is appended to (default bench/RESULTS.md)')
    ap.add_argument('--from-records', type=Path, metavar='JSONL',
                    help='report on the records of an earlier run instead of building')
    opts = ap.parse_args()
    opts.config = opts.config or DEFAULT_CONFIGS
    opts.objbtf_tree = opts.objbtf_tree.resolve()
    if opts.from_records:
        described, builds = read_records(opts.from_records)
    else:
        if opts.jobs < 2 and not opts.record_graph:
            ap.error('-j must be at least 2: the projection needs a parallel measurement '
                     '(or --record-graph, for the replay\'s validation)')
        become_subreaper()
        work = opts.work.resolve()
        work.mkdir(parents=True, exist_ok=True)
        records = work / f'records-{time.strftime("%Y%m%d-%H%M")}.jsonl'
        described = run(opts, work, records)
        described, builds = read_records(records)
    text = report(described, builds)
    print(text)
    command = command_line()
    if described.get('command', command) != command:
        command = f'{described["command"]}`, reported by `{command}'
    variants = '; '.join(f'{n}: `{a}`' for n, a in described['variants'].items())
    record('kbuild', text, results=opts.results, command=command,
           machine_state=described['machine'],
           note=(f'\n\nVariants: {variants}. Steps: full build, '
                 f'then after touching {described["touch"]}, then {described["touch_module"]}. '
                 f'Resident server: {"yes" if described["resident"] else "not in this objbtf"}. '
                 + ('Compiler cache: ccache, and objbtf\'s encode cache, both warmed by an '
                    'untimed full build of each variant. ' if described.get('ccache') else '')
                 + f'Records: {described["records"]}.'
                 + (' Every build\'s job graph recorded (--record-graph): `python3 bench/replay.py '
                    f'--from-records {described["records"]}` replays them.'
                    if described.get('record_graph') else '')))
    return 0


if __name__ == '__main__':
    sys.exit(main())
