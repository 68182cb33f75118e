#!/usr/bin/env python3
"""Per-object encode cost on the reference kernel, against its peers, in one run.

For every kernel object (host programs under scripts/ and tools/ left out;
or every Nth with --every), on copies so the build tree stays pristine, this
measures the CPU time of:
  - the compiler, re-running the object's own saved Kbuild command (gcc only,
    objtool excluded) with its output sent to a temporary file;
  - ``objbtf encode`` as Kbuild would run it: one process per object;
  - ``pahole -J`` on the same object.
It prints the ratios and appends them to bench/RESULTS.md with the command.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'tests'))
from kernel_tree import objects  # noqa: E402
KERNEL_SCRIPT = HERE.parent.parent / 'shared' / 'corpus' / 'build-kernel.sh'


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], **kw) -> float | None:
    """CPU seconds the command took (user + system), None if it failed."""
    before = child_cpu()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return child_cpu() - before if r.returncode == 0 else None


def compile_command(build: Path, obj: Path, out: Path) -> list[str] | None:
    """The object's saved gcc command, writing to ``out`` instead."""
    cmd_file = obj.parent / f'.{obj.name}.cmd'
    if not cmd_file.exists():
        return None
    m = re.search(r'^(?:saved)?cmd_\S+ := (.*)$', cmd_file.read_text(), re.M)
    if not m:
        return None
    gcc = m.group(1).split(';')[0].strip()
    args = shlex.split(gcc)
    if not args or not args[0].endswith('gcc') or '-c' not in args:
        return None
    rel = str(obj.relative_to(build))
    fixed = []
    for a in args:
        if a.startswith('-Wp,-MMD,'):
            a = f'-Wp,-MMD,{out}.d'
        fixed.append(str(out) if a == rel else a)
    return fixed


def installed_objbtf() -> str:
    """objbtf installed from this tree into bench/.venv, as a user installs it.

    Not the development install: an editable install's import hook, and
    wrappers such as pyenv's shims, add start-up time a user does not pay.
    """
    venv = HERE / '.venv'
    if not (venv / 'bin' / 'pip').exists():
        subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    subprocess.run([str(venv / 'bin' / 'pip'), 'install', '-q', str(HERE.parent)], check=True)
    return str(venv / 'bin' / 'objbtf')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=1, help='measure every Nth object (default: all)')
    ap.add_argument('--build', type=Path, help='kernel O= tree (default: build-kernel.sh)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    build = args.build or Path(subprocess.run(['bash', str(KERNEL_SCRIPT)], check=True,
                                              capture_output=True, text=True).stdout.strip())
    objbtf = installed_objbtf()
    env = dict(os.environ)
    env.pop('PYTHONDONTWRITEBYTECODE', None)      # an installed tool keeps its .pyc
    subprocess.run([objbtf, '--help'], env=env, stdout=subprocess.DEVNULL, check=True)
    objs = objects(build)[::args.every]
    totals = {'compile': 0.0, 'objbtf': 0.0, 'pahole': 0.0}
    measured = skipped = 0
    start = time.time()
    with tempfile.TemporaryDirectory() as d:
        for i, obj in enumerate(objs):
            work = Path(d) / 'o.o'
            cmd = compile_command(build, obj, Path(d) / 'c.o')
            if cmd is None:
                continue
            c = timed(cmd, cwd=build)
            shutil.copyfile(obj, work)
            e = timed([objbtf, 'encode', '-q', str(work)], env=env)
            shutil.copyfile(obj, work)
            p = timed(['pahole', '-J', '--btf_gen_floats', str(work)])
            if None in (c, e, p):       # pahole cannot read the real-mode objects
                skipped += 1
                continue
            totals['compile'] += c
            totals['objbtf'] += e
            totals['pahole'] += p
            measured += 1
            if sys.stderr.isatty():
                print(f'\r{i + 1}/{len(objs)} {obj.relative_to(build)}'[:78].ljust(78),
                      end='', file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    report = (f'objects measured: {measured} (every {args.every}; {skipped} skipped: a tool failed), wall {time.time() - start:.0f} s\n'
              f'compile CPU {totals["compile"]:.1f} s, objbtf encode CPU {totals["objbtf"]:.1f} s, '
              f'pahole -J CPU {totals["pahole"]:.1f} s\n'
              f'objbtf / compile = {totals["objbtf"] / totals["compile"]:.3f} (goal <= 0.10); '
              f'objbtf / pahole = {totals["objbtf"] / totals["pahole"]:.2f}; '
              f'per object: objbtf {1000 * totals["objbtf"] / measured:.0f} ms, '
              f'pahole {1000 * totals["pahole"] / measured:.0f} ms, '
              f'compile {1000 * totals["compile"] / measured:.0f} ms')
    print(report)
    if not args.no_record:
        cmdline = 'python3 bench/encode_bench.py' + (f' --every {args.every}' if args.every > 1 else '')
        with open(HERE / 'RESULTS.md', 'a') as f:
            f.write(f'\n## encode, {time.strftime("%Y-%m-%d %H:%M")}\n\n`{cmdline}`\n\n```\n{report}\n```\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
