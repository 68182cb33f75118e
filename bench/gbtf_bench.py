#!/usr/bin/env python3
"""The DWARF-less path per object, against the DWARF path, on the same kernel objects.

For every Nth object of the reference kernel (host programs left out), in
rounds that alternate the two variants (A B A B ...), this measures the CPU
time (user + system) of:
  - compiling the object with its saved Kbuild command (-g, DWARF) and with
    the same command built for the DWARF-less build (-g dropped, -gbtf);
  - ``objbtf encode`` (one process per object, as Kbuild runs it, from a
    plain install in bench/.venv) on each of the two: DWARF, GCC's BTF;
  - compiling the object without any debug information (-g dropped and
    nothing in its place): the floor of every BTF design that takes the
    types from the compiler, whose ratio to -gbtf says what GCC's own BTF
    costs it;
and the size of each object after encoding.  The three compiles run in an
order that rotates from object to object.  Medians over the rounds of the
summed CPU, their ratios, appended to bench/RESULTS.md with the command.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / 'testsupport')]
from encode_bench import objects, reference_kernel, timed  # noqa: E402
from accounting import cpu_mark, others_share, others_since  # noqa: E402
from install import clean_env, installed_objbtf  # noqa: E402
from harness import doubts, paired_ratio, record, rotated  # noqa: E402
from saved_commands import compile_command, without_debug, without_dwarf  # noqa: E402

#: The compiles of an object: (name, the command from its saved one).
VARIANTS = (('-g', list), ('-gbtf', without_dwarf), ('none', without_debug))


def one_round(build: Path, work: Path, objs: list[Path], objbtf: str,
              env: dict, turn: int) -> dict[str, float]:
    """CPU totals of one pass over the objects; the compiles of each object
    in ``VARIANTS``' order rotated by the object's index plus ``turn``."""
    totals = dict.fromkeys(('compile -g', 'compile -gbtf', 'compile none', 'encode DWARF',
                            'encode GCC BTF', 'bytes -g', 'bytes -gbtf'), 0.0)
    for i, obj in enumerate(objs):
        for name, command in rotated(VARIANTS, i + turn):
            out = work / 'object.o'
            c = command(compile_command(build, obj, out))
            cpu = timed(c, cwd=build)
            if cpu is None:
                raise SystemExit(f'compile failed: {" ".join(c)}')
            totals[f'compile {name}'] += cpu
            if name == 'none':
                continue
            enc = timed([objbtf, 'encode', '-q', str(out)], env=env)
            if enc is None:
                raise SystemExit(f'objbtf encode failed on {out}')
            totals['encode DWARF' if name == '-g' else 'encode GCC BTF'] += enc
            totals[f'bytes {name}'] += out.stat().st_size
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=20, help='measure every Nth object (default 20)')
    ap.add_argument('--rounds', type=int, default=4, help='alternating rounds (default 4)')
    ap.add_argument('--build', type=Path, help='kernel O= tree (default: build-kernel.sh)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    build = args.build or reference_kernel()
    objbtf = installed_objbtf()
    env = clean_env()
    objs = [obj for obj in objects(build)[::args.every]
            if compile_command(build, obj, obj) is not None]
    start, mark = time.time(), cpu_mark()
    rounds = []
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            rounds.append(one_round(build, Path(d), objs, objbtf, env, turn=r))
            print(f'round {r + 1}/{args.rounds}: ' +
                  ', '.join(f'{k} {v:.1f}' for k, v in rounds[-1].items() if 'bytes' not in k),
                  file=sys.stderr)
    share = others_share(others_since(mark), time.time() - start)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    n = len(objs)
    paired = []
    for name, base, other in (('-gbtf / -g', 'compile -g', 'compile -gbtf'),
                              ('none / -g', 'compile -g', 'compile none'),
                              ('none / -gbtf', 'compile -gbtf', 'compile none')):
        ratio = paired_ratio([r[base] for r in rounds], [r[other] for r in rounds])
        paired.append(f'compile {name}, round by round: {ratio}' +
                      ''.join(f'\ndoubt: {d}' for d in doubts(ratio, share)))
    report = (
        f'objects: {n} (every {args.every}), {args.rounds} rounds, the compiles in rotating '
        f'order, wall {time.time() - start:.0f} s; medians of the summed CPU:\n'
        f'compile -g {med["compile -g"]:.1f} s, compile -gbtf (no -g) {med["compile -gbtf"]:.1f} s: '
        f'ratio {med["compile -gbtf"] / med["compile -g"]:.3f}\n'
        f'compile without debug information {med["compile none"]:.1f} s: '
        f'{med["compile none"] / med["compile -g"]:.3f} of -g, '
        f'{med["compile none"] / med["compile -gbtf"]:.3f} of -gbtf\n'
        f'objbtf encode on DWARF {med["encode DWARF"]:.2f} s ({1000 * med["encode DWARF"] / n:.0f} ms/object), '
        f'on GCC BTF {med["encode GCC BTF"]:.2f} s ({1000 * med["encode GCC BTF"] / n:.0f} ms/object): '
        f'ratio {med["encode GCC BTF"] / med["encode DWARF"]:.3f}\n'
        f'encode / compile: DWARF path {med["encode DWARF"] / med["compile -g"]:.3f}, '
        f'DWARF-less path {med["encode GCC BTF"] / med["compile -gbtf"]:.3f}\n'
        f'compile + encode: DWARF-less / DWARF = '
        f'{(med["compile -gbtf"] + med["encode GCC BTF"]) / (med["compile -g"] + med["encode DWARF"]):.3f}\n'
        f'encoded objects: {med["bytes -g"] / 1e6:.1f} MB with -g, {med["bytes -gbtf"] / 1e6:.1f} MB '
        f'with -gbtf: ratio {med["bytes -gbtf"] / med["bytes -g"]:.3f}\n'
        + '\n'.join(paired) +
        f'\nothers used {100 * share:.0f}% of the machine\'s CPU')
    print(report)
    if not args.no_record:
        record('DWARF-less path per object (gcc -gbtf)', report)
    return 0


if __name__ == '__main__':
    shutil.which('gcc') or sys.exit('gcc is not installed')
    sys.exit(main())
