#!/usr/bin/env python3
"""Per-object encode cost on the reference kernel, against its peers, in one run.

For every kernel object (host programs under scripts/ and tools/ left out;
or every Nth with --every), on copies so the build tree stays pristine, this
measures the CPU time (user + system, children included) of:
  - the compiler, re-running the object's own saved Kbuild command (gcc only,
    objtool excluded) with its output sent to a temporary file;
  - ``objbtf encode`` as Kbuild would run it: one command per object, from a
    plain install in bench/.venv, through the client ``objbtf server
    command`` prints (the one the integration asks objbtf for and runs,
    docs/resident-server.md; the C client when it is built), or with
    ``--client installed`` the ``objbtf`` script; with a resident
    server, the CPU of the server's work for it counts too (accounting.py:
    the server is reparented to this process, and its tree's CPU is read
    before and after);
  - ``pahole -J`` on the same object, with the flags the tree's Kbuild
    gives it (``kernel_tree.pahole_flags``: 7.2's Makefile.btf for 7.2).
The three take turns object by object, in the reverse order on every other
object.  It prints the ratios, over all objects and the median of the
per-object ones, and appends them to bench/RESULTS.md with the command.
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import become_subreaper, server_supported, settle_servers, tree_cpu  # noqa: E402
from install import clean_env, installed_objbtf, quick_client  # noqa: E402
from kernel_tree import objects, pahole_flags  # noqa: E402
from harness import pahole_version, record, turn_order  # noqa: E402
from saved_commands import compile_command  # noqa: E402
KERNEL_SCRIPT = HERE.parent / 'scripts' / 'build-kernel.sh'
TOOLS = ('compile', 'objbtf', 'pahole')


def reference_kernel(modules: bool = False) -> Path:
    """The reference kernel's O= build tree (with ``modules``, the
    modules-heavy one's), from build-kernel.sh, which builds it once."""
    return Path(subprocess.run(['bash', str(KERNEL_SCRIPT), *(['--modules'] if modules else [])],
                               check=True, capture_output=True, text=True).stdout.strip())


def timed(cmd: list[str], **kw) -> float | None:
    """CPU seconds the command took (user + system, with all it started,
    a resident server's work included), None if it failed."""
    before = tree_cpu()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return tree_cpu() - before if r.returncode == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=1, help='measure every Nth object (default: all)')
    ap.add_argument('--build', type=Path, help='kernel O= tree (default: build-kernel.sh)')
    ap.add_argument('--kernel-modules', action='store_true',
                    help='the modules-heavy configuration (build-kernel.sh --modules)')
    ap.add_argument('--fresh', action='store_true',
                    help="encode the compiler's own output (its command run once first) "
                         'instead of the tree\'s object: for a tree built with OBJBTF, whose '
                         'objects carry BTF already, which pahole -J leaves alone')
    ap.add_argument('--client', choices=('quick', 'installed'), default='quick',
                    help="quick: the command line 'objbtf server command' prints (default); "
                         "installed: the objbtf script")
    ap.add_argument('--pahole', default='pahole', metavar='PATH',
                    help='the peer (default: the installed pahole; the report names its '
                         'version): the newest, scripts/build-pahole.sh vendor/dwarves-*.tar.xz PREFIX')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    build = args.build or reference_kernel(args.kernel_modules)
    become_subreaper()
    objbtf = installed_objbtf()
    objs = objects(build)[::args.every]
    peer = [args.pahole, '-J', *pahole_flags(build, args.pahole)]
    cpu: dict[str, list[float]] = {t: [] for t in TOOLS}
    skipped = 0
    start, load = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / 'server.log'
        env = clean_env(OBJBTF_SERVER_LOG=str(log))
        subprocess.run([objbtf, '--help'], env=env, stdout=subprocess.DEVNULL, check=True)
        client = [objbtf] if args.client == 'installed' else quick_client(objbtf, env)
        for i, obj in enumerate(objs):
            work = Path(d) / 'o.o'
            cmd = compile_command(build, obj, Path(d) / 'c.o')
            if cmd is None:
                continue
            source = obj
            if args.fresh:
                source = Path(d) / 'fresh.o'
                subprocess.run(cmd, cwd=build, check=True)
                shutil.copyfile(Path(d) / 'c.o', source)
            got = {}
            for tool in turn_order(TOOLS, i):
                if tool == 'compile':
                    got[tool] = timed(cmd, cwd=build)
                    continue
                shutil.copyfile(source, work)
                got[tool] = timed([*client, 'encode', '-q', str(work)] if tool == 'objbtf' else
                                  [*peer, str(work)], env=env)
            if None in got.values():        # pahole cannot read the real-mode objects
                skipped += 1
                continue
            for tool in TOOLS:
                cpu[tool].append(got[tool])
            if sys.stderr.isatty():
                print(f'\r{i + 1}/{len(objs)} {obj.relative_to(build)}'[:78].ljust(78),
                      end='', file=sys.stderr)
        before = tree_cpu()
        servers = settle_servers([objbtf] if server_supported([objbtf], env) else None,
                                 Path.cwd(), env, log)
        idle = tree_cpu() - before - servers.stop_cpu     # the server's, after the last object
    if sys.stderr.isatty():
        print(file=sys.stderr)
    version = pahole_version(args.pahole)
    report = f'objbtf client: {shlex.join(client)}\npeer: {shlex.join(peer)} OBJECT\n' + summary(
        cpu, skipped, args.every, time.time() - start, idle, servers.as_dict(),
        version)
    report += f'\nload average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end'

    print(report)
    if not args.no_record:
        record('encode', report)
    return 0


def summary(cpu: dict[str, list[float]], skipped: int, every: int, wall: float, idle: float,
            servers: dict, peer: str) -> str:
    """The report: totals, ratios over all objects and per object; ``peer``:
    the pahole's name and version."""
    n = len(cpu['objbtf'])
    total = {t: sum(v) for t, v in cpu.items()}
    total['objbtf'] += idle
    per_object = {peer: statistics.median(o / p for o, p in zip(cpu['objbtf'], cpu[peer]) if p > 0)
                  for peer in ('compile', 'pahole')}
    server = (f'resident server: {servers["processes"]} process(es), {servers["requests"]} requests, '
              f'{idle:.1f} s of its CPU after the last object (counted); '
              f'{"; ".join(servers["problems"]) or "accounting checked"}\n'
              if servers['processes'] else 'no resident server\n')
    return (f'objects measured: {n} (every {every}; {skipped} skipped: a tool failed), wall {wall:.0f} s\n'
            f'compile CPU {total["compile"]:.1f} s, objbtf encode CPU {total["objbtf"]:.1f} s, '
            f'{peer} -J CPU {total["pahole"]:.1f} s\n' + server +
            f'objbtf / compile = {total["objbtf"] / total["compile"]:.3f} (goal <= 0.03), '
            f'median per object {per_object["compile"]:.3f}\n'
            f'objbtf / {peer} = {total["objbtf"] / total["pahole"]:.2f} (goal <= 2), '
            f'median per object {per_object["pahole"]:.2f}\n'
            f'per object: objbtf {1000 * total["objbtf"] / n:.0f} ms, '
            f'{peer} {1000 * total["pahole"] / n:.0f} ms, compile {1000 * total["compile"] / n:.0f} ms')


if __name__ == '__main__':
    sys.exit(main())
