#!/usr/bin/env python3
"""Where the per-object step's CPU goes around ``encode_elf``.

``encode_bench.py`` measures the step as Kbuild runs it (the client and
the resident server's worker); ``code_ab.py`` and ``decode_floor.py`` time
``encode_elf`` in one warm process.  This bench splits the difference on
every Nth object of the reference kernel, with a plain install of this
checkout (bench/.venv), in three ways of running the step:

- ``elf``: ``encode_elf`` on the object, in a warm process of the install's
  Python (a helper this bench starts, which reads requests on its stdin);
- ``file``: ``commands.run_encode`` on a fresh copy, in that process:
  ``encode_elf`` plus opening and rewriting the object, the cache lookup
  and the collector's pause, what the server's worker runs;
- ``server``: the client ``objbtf server command`` prints, through the
  resident server, on a fresh copy (the client's CPU and the server's:
  accounting.tree_cpu);
and, for the round trip alone, ``server`` on an object without DWARF
(``int x;`` compiled without ``-g``): the client, the request, and the
typeless chunk the worker writes.

Each way runs twice an object: ``cold``, right after the object's own
compile (its saved Kbuild command, run untimed), as the step runs in a
build; ``warm``, right after the cold one.  The ways take turns, in an
order that rotates object by object.  The report gives the mean CPU of each
per object and the differences that split the step.  Figures from
tree_cpu have the kernel's tick as their unit, so only means over many
objects say anything.

Appends the report to bench/RESULTS.md with the command line.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import become_subreaper  # noqa: E402
from encode_bench import reference_kernel  # noqa: E402
from install import clean_env, installed_objbtf, quick_client  # noqa: E402
from kernel_tree import objects  # noqa: E402
from saved_commands import compile_command  # noqa: E402
from harness import record, rotated  # noqa: E402
from server_ab import encode_cpu  # noqa: E402

WAYS = ('elf', 'file', 'server')

#: The helper, run by the install's Python: for each line 'elf PATH' or
#: 'file PATH' on stdin, the CPU seconds that took, on stdout.
HELPER = r'''
import sys, time
from objbtf import implementation
from objbtf.btf.types import gc_paused
from objbtf.cli.commands import run_encode
from objbtf.elf.reader import ElfFile
from objbtf.encode.encoder import encode_elf
from objbtf.features import Features
features = Features()
print(implementation(), flush=True)
for line in sys.stdin:
    way, path = line.rstrip('\n').split(' ', 1)
    start = time.process_time()
    if way == 'elf':
        with gc_paused(), ElfFile.open(path) as elf:
            encode_elf(elf, features, path)
    elif run_encode([path], features, True) != 0:
        sys.exit(f'{path}: objbtf encode failed')
    print(time.process_time() - start, flush=True)
'''


class InProcess:
    """The helper process: ``elf`` and ``file`` measured in it."""

    def __init__(self, python: str, env: dict[str, str]):
        self.proc = subprocess.Popen([python, '-c', HELPER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.implementation = self._line()

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit('the in-process helper ended')
        return line.strip()

    def cpu(self, way: str, path: Path) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f'{way} {path}\n')
        self.proc.stdin.flush()
        return float(self._line())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=10, help='every Nth kernel object (default 10)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    build = reference_kernel()
    become_subreaper()
    objbtf = installed_objbtf()
    env = clean_env()
    env.pop('OBJBTF_CACHE_DIR', None)
    start, load = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix='objbtf-step-split-') as d:
        tmp = Path(d)
        client = quick_client(objbtf, env)
        helper = InProcess(str(Path(objbtf).parent / 'python'), env)
        bare = tmp / 'bare.o'
        subprocess.run(['gcc', '-c', '-x', 'c', '-', '-o', str(bare)], input=b'int x;\n',
                       check=True)
        work = tmp / 'o.o'

        def measure(way: str, source: Path) -> float:
            if way == 'server':
                return encode_cpu(client, source, work, env)[0]
            if way == 'round trip':
                return encode_cpu(client, bare, work, env)[0]
            if way == 'file':
                shutil.copyfile(source, work)
                return helper.cpu(way, work)
            return helper.cpu(way, source)

        measure('round trip', bare)     # the server started and warm, untimed
        cpu: dict[str, list[float]] = {f'{w} {s}': [] for w in (*WAYS, 'round trip')
                                       for s in ('cold', 'warm')}
        sample = [(o, command) for o in objects(build)[::args.every]
                  if (command := compile_command(build, o, tmp / 'c.o')) is not None]
        for i, (obj, command) in enumerate(sample):
            for way in (*rotated(WAYS, i), 'round trip'):
                subprocess.run(command, cwd=build, check=True)
                for state in ('cold', 'warm'):
                    cpu[f'{way} {state}'].append(measure(way, obj))
            if sys.stderr.isatty():
                print(f'\r{i + 1}/{len(sample)} {obj.relative_to(build)}'[:78].ljust(78),
                      end='', file=sys.stderr)
        helper.close()
    if sys.stderr.isatty():
        print(file=sys.stderr)
    report = summary(cpu, len(sample), args.every, helper.implementation,
                     time.time() - start, (load, os.getloadavg()[0]))
    print(report)
    if not args.no_record:
        record('step split', report)
    return 0


def summary(cpu: dict[str, list[float]], n: int, every: int, implementation: str,
            wall: float, load: tuple[float, float]) -> str:
    ms = {k: 1000 * statistics.fmean(v) for k, v in cpu.items()}
    lines = [f'{n} objects (every {every}th of the reference kernel), objbtf {implementation}, '
             f'wall {wall:.0f} s',
             'mean CPU per object, ms:      cold (after its compile)   warm (right after)']
    for way in (*WAYS, 'round trip'):
        lines.append(f'  {way:27} {ms[f"{way} cold"]:8.2f} {ms[f"{way} warm"]:18.2f}')
    for state in ('cold', 'warm'):
        lines.append(f'{state}: encode_elf {ms[f"elf {state}"]:.2f}, + the file '
                     f'{ms[f"file {state}"] - ms[f"elf {state}"]:.2f}, '
                     f'+ client and server {ms[f"server {state}"] - ms[f"file {state}"]:.2f} '
                     f'(a bare round trip {ms[f"round trip {state}"]:.2f})')
    lines.append(f'caches a compile leaves cold: + {ms["server cold"] - ms["server warm"]:.2f} ms '
                 f'through the server, + {ms["elf cold"] - ms["elf warm"]:.2f} in encode_elf')
    lines.append(f'load average {load[0]:.1f} at the start, {load[1]:.1f} at the end')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
