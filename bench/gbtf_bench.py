#!/usr/bin/env python3
"""The DWARF-less path per object, against the DWARF path, on the same kernel objects.

For every Nth object of the reference kernel (host programs left out), in
rounds that alternate the two variants (A B A B ...), this measures the CPU
time (user + system) of:
  - compiling the object with its saved Kbuild command (-g, DWARF) and with
    the same command built for the DWARF-less build (-g dropped, -gbtf);
  - ``objbtf encode`` (one process per object, as Kbuild runs it, from a
    plain install in bench/.venv) on each of the two: DWARF, GCC's BTF;
and the size of each object after encoding.  Medians over the rounds of the
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
sys.path.insert(0, str(HERE))
from encode_bench import compile_command, objects, reference_kernel, timed  # noqa: E402
from install import clean_env, installed_objbtf  # noqa: E402
from results import record  # noqa: E402

DWARF_FLAGS = ('-g',)


def without_dwarf(cmd: list[str]) -> list[str]:
    """The DWARF-less build's command: -g and -gdwarf-N out, -gbtf in."""
    return [a for a in cmd if a not in DWARF_FLAGS and not a.startswith('-gdwarf')] + ['-gbtf']


def one_round(build: Path, work: Path, objs: list[Path], objbtf: str,
              env: dict, flip: bool) -> dict[str, float]:
    """CPU totals of one pass over the objects, each variant in turn
    (DWARF first, or the other way round when ``flip``)."""
    totals = dict.fromkeys(('compile -g', 'compile -gbtf', 'encode DWARF', 'encode GCC BTF',
                            'bytes -g', 'bytes -gbtf'), 0.0)
    for obj in objs:
        variants = [('-g', work / 'dwarf.o'), ('-gbtf', work / 'gbtf.o')]
        for name, out in (variants[::-1] if flip else variants):
            c = compile_command(build, obj, out)
            if name == '-gbtf':
                c = without_dwarf(c)
            cpu = timed(c, cwd=build)
            if cpu is None:
                raise SystemExit(f'compile failed: {" ".join(c)}')
            totals[f'compile {name}'] += cpu
            key = 'encode DWARF' if name == '-g' else 'encode GCC BTF'
            enc = timed([objbtf, 'encode', '-q', str(out)], env=env)
            if enc is None:
                raise SystemExit(f'objbtf encode failed on {out}')
            totals[key] += enc
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
    start = time.time()
    rounds = []
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            rounds.append(one_round(build, Path(d), objs, objbtf, env, flip=bool(r % 2)))
            print(f'round {r + 1}/{args.rounds}: ' +
                  ', '.join(f'{k} {v:.1f}' for k, v in rounds[-1].items() if 'bytes' not in k),
                  file=sys.stderr)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    n = len(objs)
    report = (
        f'objects: {n} (every {args.every}), {args.rounds} rounds alternating -g/-gbtf, '
        f'wall {time.time() - start:.0f} s; medians of the summed CPU:\n'
        f'compile -g {med["compile -g"]:.1f} s, compile -gbtf (no -g) {med["compile -gbtf"]:.1f} s: '
        f'ratio {med["compile -gbtf"] / med["compile -g"]:.3f}\n'
        f'objbtf encode on DWARF {med["encode DWARF"]:.2f} s ({1000 * med["encode DWARF"] / n:.0f} ms/object), '
        f'on GCC BTF {med["encode GCC BTF"]:.2f} s ({1000 * med["encode GCC BTF"] / n:.0f} ms/object): '
        f'ratio {med["encode GCC BTF"] / med["encode DWARF"]:.3f}\n'
        f'encode / compile: DWARF path {med["encode DWARF"] / med["compile -g"]:.3f}, '
        f'DWARF-less path {med["encode GCC BTF"] / med["compile -gbtf"]:.3f}\n'
        f'compile + encode: DWARF-less / DWARF = '
        f'{(med["compile -gbtf"] + med["encode GCC BTF"]) / (med["compile -g"] + med["encode DWARF"]):.3f}\n'
        f'encoded objects: {med["bytes -g"] / 1e6:.1f} MB with -g, {med["bytes -gbtf"] / 1e6:.1f} MB '
        f'with -gbtf: ratio {med["bytes -gbtf"] / med["bytes -g"]:.3f}')
    print(report)
    if not args.no_record:
        record('DWARF-less path per object (gcc -gbtf)', report)
    return 0


if __name__ == '__main__':
    shutil.which('gcc') or sys.exit('gcc is not installed')
    sys.exit(main())
