#!/usr/bin/env python3
"""What the resident server saves: per-object encode and module-link CPU,
with and without it, on the reference kernel's objects, in turns.

Three ways of running objbtf, taking turns round after round (A B C A B C):
  - in process: the installed console script with OBJBTF_RESIDENT=0, as
    before the server (one interpreter start and all the imports per call);
  - server: the installed console script, through the tree's server;
  - quick client: what ``objbtf server command`` prints (the C client when
    it is built, else python -S on the bare client), through the server.
Each round encodes copies of every Nth kernel object (one process per object,
as Kbuild runs them, from the top of a scratch tree) and then links every
Mth module of the tree's modules.order (--every-module; the reference
kernel has three: veth, tun, dummy) (`objbtf link --objects M.mod --base
vmlinux --base-index .btf.vmlinux.index`, as Makefile.modfinal, with -o so
the module stays as it was; the index made once before the rounds, as the
first of a build's many module links makes it).  The CPU counted
is the clients' (children of this script) plus the server's: a fresh server
per phase, stopped at the phase's end and reaped by this script (a
subreaper, bench/accounting.py), its CPU (with its workers') checked against
the line it writes to OBJBTF_SERVER_LOG.  A server's start (interpreter and warm imports,
paid once per tree and build) is measured on its own and shown apart.
The module links run twice through the server: once in a fresh server,
where the worker's first link reads vmlinux's indexed BTF, and once more
in one server that links the modules once and then --passes times more
on the base the worker kept (``linkdedup.pipeline._last_base``), as most
of a build's module links run: the second figure is that phase's CPU less
the first's, over the links of the passes.  The passes are what makes it
worth reading: the subtraction puts the noise of a whole fresh phase (the
server's start, the first links) on the kept links, and with one pass of
three links it swamped them.
The module links' peer, in each round too, as many times as a kept-base
link: what Makefile.modfinal runs in the stock build, ``pahole -J`` with
the flags the tree's Kbuild gives --pahole (6.1's pahole-flags.sh; from
6.8 on Makefile.btf's PAHOLE_FLAGS) ``--btf_base vmlinux`` on the module
(``--btf_encode_detached``, so that the module stays as it is); on a 7.x
tree objbtf link gets the BTF features gen-btf.sh gives it.
Appends the figures to bench/RESULTS.md with the command.
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from kernel_tree import link_features, objects, pahole_flags  # noqa: E402
from encode_bench import installed_objbtf  # noqa: E402
from accounting import (  # noqa: E402
    become_subreaper, cpu_mark, others_share, others_since, settle_servers,
)
from install import quick_client  # noqa: E402
from harness import doubts, paired_ratio, pahole_version, record  # noqa: E402
from saved_commands import compile_command, first_command  # noqa: E402

KERNEL = Path('/var/cache/objbtf/kernel-6.1/build')


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def tree_modules(build: Path) -> list[str]:
    """The tree's modules, as modules.order lists them, without .ko or .o."""
    return [line.rsplit('.', 1)[0] for line in (build / 'modules.order').read_text().split()]


def saved_link(build: Path, target: str) -> list[str]:
    """The first command of the line Kbuild saved for ``target`` (its `ld`)."""
    return first_command(build / target)


def scratch_tree(build: Path, dest: Path, objs: list[str], modules: list[str]) -> None:
    """The objects and the modules' inputs under ``dest``, at their paths;
    the modules' objects encoded and relinked with their saved `ld -r`
    (first the module's object from its members when it has several)."""
    for rel in [*objs, 'scripts/module.lds',
                *(f'{m}{ext}' for m in modules for ext in ('.mod', '.mod.o'))]:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build / rel, dest / rel)
    for m in modules:
        members = (build / f'{m}.mod').read_text().split()
        for rel in [*members, f'{m}.mod.o']:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(build / rel, dest / rel)
            subprocess.run([sys.executable, '-m', 'objbtf', 'encode', '-q', rel], cwd=dest,
                           check=True, env={**os.environ, 'OBJBTF_RESIDENT': '0'})
        if members != [f'{m}.o']:
            subprocess.run(saved_link(build, f'{m}.o'), cwd=dest, check=True)
        subprocess.run(saved_link(build, f'{m}.ko'), cwd=dest, check=True)


def run_phase(cmd: list[str], objbtf: list[str], env: dict, tree: Path,
              jobs: list[list[str]]) -> tuple[float, float, list[str]]:
    """(clients' CPU, server's CPU, what went wrong with the server) of
    running ``jobs`` one after the other; then the tree's server is stopped
    and reaped (``accounting.settle_servers``), its CPU checked against
    its log line."""
    log = tree / 'server.log'
    log.unlink(missing_ok=True)
    env = {**env, 'OBJBTF_SERVER_LOG': str(log)}
    before = child_cpu()
    for args in jobs:
        subprocess.run(cmd + args, cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    clients = child_cpu() - before
    servers = settle_servers(objbtf, tree, env, log)
    return clients, servers.cpu, servers.problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=10, help='every Nth kernel object (default 10)')
    ap.add_argument('--rounds', type=int, default=2, help='rounds of turns (default 2)')
    ap.add_argument('--passes', type=int, default=5,
                    help='passes over the modules on the kept base, and of pahole, per round '
                         '(default 5)')
    ap.add_argument('--every-module', type=int, default=1, metavar='M',
                    help="every Mth module of the tree's modules.order (default 1: all)")
    ap.add_argument('--build', type=Path, default=KERNEL, help='kernel O= tree')
    ap.add_argument('--pahole', default='pahole', metavar='PATH',
                    help="the module links' peer, with the flags the tree's Kbuild gives it "
                         '(default: the installed pahole; the report names its version; for a '
                         '7.x tree: the newest, scripts/build-pahole.sh)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    installed = installed_objbtf()
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONDONTWRITEBYTECODE', 'PYTHONPATH')}
    quick = quick_client(installed, env)
    ways = {'in process': ([installed], {**env, 'OBJBTF_RESIDENT': '0'}),
            'server': ([installed], {**env, 'OBJBTF_RESIDENT': '1'}),
            'quick client': (quick, {**env, 'OBJBTF_RESIDENT': '1'})}
    objs = [str(p.relative_to(args.build)) for p in objects(args.build)[::args.every]
            if not p.name.endswith('.mod.o')]
    all_modules = tree_modules(args.build)
    modules = all_modules[::args.every_module]
    flags = pahole_flags(args.build, args.pahole)
    links = [['link', '-q', *link_features(args.build, flags), '--objects', f'{m}.mod',
              '--base', str(args.build / 'vmlinux'), '--base-index', '.btf.vmlinux.index',
              '-o', 'm.btf', f'{m}.ko'] for m in modules]
    figures: dict[str, dict[str, list[float]]] = {w: {'encode': [], 'link': [], 'kept': []}
                                                  for w in ways}
    problems: list[str] = []
    version = pahole_version(args.pahole)
    pahole: list[float] = []
    become_subreaper()              # the servers' CPU is reaped, and counted as ours
    started = time.time()
    with tempfile.TemporaryDirectory() as d:
        pristine = Path(d) / 'pristine'
        scratch_tree(args.build, pristine, objs, modules)
        subprocess.run([installed, *links[0]], cwd=pristine, check=True,
                       env={**env, 'OBJBTF_RESIDENT': '0'})      # makes the index
        (pristine / 'm.btf').unlink()
        compile_cpu = 0.0
        for rel in objs:
            cmd = compile_command(args.build, args.build / rel, Path(d) / 'c.o')
            if cmd:
                before = child_cpu()
                subprocess.run(cmd, cwd=args.build, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                compile_cpu += child_cpu() - before
        mark, rounds_started = cpu_mark(), time.time()
        for _ in range(args.rounds):
            for way, (cmd, way_env) in ways.items():
                tree = Path(d) / 'tree'
                shutil.rmtree(tree, ignore_errors=True)
                shutil.copytree(pristine, tree)
                phases = [run_phase(cmd, [installed], way_env, tree, jobs) for jobs in (
                    [['encode', '-q', rel] for rel in objs], [['cc', '--', 'true']],
                    links, links * (1 + args.passes))]
                problems += [found for _, _, some in phases for found in some]
                (c_enc, s_enc, _), (_, start, _), (c_once, s_once, _), (c_kept, s_kept, _) = phases
                once = c_once + s_once - start      # start: the server's CPU for `cc -- true`
                passes = c_kept + s_kept
                figures[way]['encode'].append((c_enc + s_enc) / len(objs))
                figures[way]['link'].append(once / len(links))
                figures[way]['kept'].append((passes - start - once) / (len(links) * args.passes))
                figures[way].setdefault('start', []).append(start)
            before = child_cpu()
            for m in modules * args.passes:
                subprocess.run([args.pahole, '-J', *flags, '--btf_base', str(args.build / 'vmlinux'),
                                '--btf_encode_detached', str(Path(d) / 'p.btf'),
                                str(args.build / f'{m}.ko')], check=True)
            pahole.append((child_cpu() - before) / (len(modules) * args.passes))
        share = others_share(others_since(mark), time.time() - rounds_started)
    lines = [f'{len(objs)} objects (every {args.every}th of {args.build}), {len(modules)} of its '
             f'{len(all_modules)} modules, {args.passes} passes on the kept base, '
             f'{args.rounds} rounds in turns, '
             f'wall {time.time() - started:.0f} s, load average {os.getloadavg()[0]:.1f}; '
             f'compile CPU of these objects {1000 * compile_cpu / len(objs):.0f} ms each',
             'CPU per call (clients + server), median of rounds; encode: the server start '
             'spread over the objects; module link: without it (the encodes started the server), '
             'in a fresh server, then with the base kept by the worker (the passes after the first):']
    base = statistics.median(figures['in process']['encode'])
    peer = statistics.median(pahole)
    for way, f in figures.items():
        enc, link = statistics.median(f['encode']), statistics.median(f['link'])
        kept, start = statistics.median(f['kept']), statistics.median(f['start'])
        lines.append(f'  {way:12} encode {1000 * enc:6.1f} ms ({enc / base:.2f} x in process, '
                     f'{enc * len(objs) / compile_cpu:.3f} of the compile)   module link '
                     f'{1000 * link:6.1f} ms ({link / peer:.2f} x pahole), base kept '
                     f'{1000 * kept:6.1f} ms ({kept / peer:.2f} x)'
                     + (f'   (server start {1000 * start:.0f} ms, once per tree)' if start else ''))
    lines.append(f'  {version} -J {shlex.join(flags)} --btf_base vmlinux: {1000 * peer:.1f} ms per '
                 'module (goal for the module link: at most 1.0 x)')
    lines.append('module link / pahole, paired round by round (median, range):')
    for way, f in figures.items():
        ratios = {'fresh': paired_ratio(pahole, f['link']),
                  'base kept': paired_ratio(pahole, f['kept'])}
        lines.append(f'  {way:12} ' + '   '.join(f'{k} {r}' for k, r in ratios.items()))
        lines += [f'  doubt: {way}, {k}: {d}' for k, r in ratios.items() for d in doubts(r, share)]
    lines += [f'problem: {p}' for p in problems]
    report = '\n'.join(lines)
    print(report)
    if not args.no_record:
        record('resident server', report)
    return 0


if __name__ == '__main__':
    sys.exit(main())
