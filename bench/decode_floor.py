#!/usr/bin/env python3
"""Two phases of the per-object step against the same work done in C.

How far below objbtf's cost could a per-object step go, on the reference
kernel's objects (every Nth one with DWARF)?  Measured, in turns:

- **decoding the DWARF**: objbtf's ``read_units`` (this checkout, compiled
  or not as it is installed) on each object's DWARF sections, relocated as
  the encoder reads them (the relocation is left out of the time), against
  ``decode_floor.c``, built here with ``gcc -O2``, which decodes every
  attribute of every DIE of the same objects and builds nothing.  Before
  the first turn, the C decoder's DIE count of the first object is checked
  against ``readelf --debug-dump=info``'s;
- **the per-object dedup**: objbtf's ``dedup`` against libbpf's
  ``btf__dedup`` (libbpf.so.1 through ctypes: the algorithm objbtf
  follows), on each object's own BTF as ``objbtf encode`` writes it (the
  dedup's input, but for the types it merged: about 1 %), the two taking
  turns object by object in one process; parsing is left out of both.

Each turn also times objbtf's whole step in process (``encode_elf``), to
say what share of it decoding is.  Prints the medians over the
turns and their ratios, and appends them to bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from encode_bench import objects, reference_kernel  # noqa: E402
from install import clean_env  # noqa: E402
from harness import record, turn_order  # noqa: E402

#: One objbtf turn: the CPU seconds of read_units, of encode_elf, and of
#: dedup beside libbpf's btf__dedup, summed over the objects, as JSON.
CHILD = r'''
import ctypes, gc, json, sys, time
import objbtf
from objbtf.btf.dedup import dedup
from objbtf.btf.reader import parse_btf
from objbtf.dwarf.reader import read_units
from objbtf.elf.reader import ElfFile
from objbtf.encode.encoder import debug_sections, encode_elf
from objbtf.features import Features
from libbpf import libbpf
lib, features = libbpf(), Features()
gc.disable()                        # as encode_path runs, gc_paused
clock = time.process_time
times = dict(decode=0.0, encode=0.0, dedup=0.0, libbpf=0.0)
for k, path in enumerate(sys.argv[1:]):
    with ElfFile.open(path) as elf:
        secs = debug_sections(elf)
        start = clock(); read_units(secs); times['decode'] += clock() - start
        start = clock(); raw = encode_elf(elf, features, path).raw
        times['encode'] += clock() - start
    btf = parse_btf(raw)
    handle = lib.btf__new(raw, len(raw))
    def ours():             # consuming its input, as the encoder does
        start = clock(); dedup(btf, consume=True); times['dedup'] += clock() - start
    def theirs():
        start = clock()
        if lib.btf__dedup(handle, None):
            sys.exit(f'{path}: btf__dedup failed')
        times['libbpf'] += clock() - start
    for run in ((ours, theirs) if k % 2 == 0 else (theirs, ours)):
        run()
    lib.btf__free(handle)
print(json.dumps(dict(times, code=objbtf.implementation())))
'''


def sample(build: Path, every: int) -> list[Path]:
    """Every ``every``th kernel object that has DWARF (and so a step to
    time), 64-bit as the C decoder reads."""
    from objbtf.elf.reader import ElfFile
    out = []
    for path in objects(build)[::every]:
        with ElfFile.open(str(path)) as elf:
            info = elf.debug_section('.debug_info')
            if elf.elf_class == 64 and info is not None and info.size:
                out.append(path)
    return out


def build_decoder(dest: Path) -> Path:
    exe = dest / 'decode_floor'
    subprocess.run(['gcc', '-O2', '-o', str(exe), str(HERE / 'decode_floor.c')], check=True)
    return exe


def readelf_dies(path: Path) -> int:
    """The DIEs of ``path`` by readelf: its entries but the null ones."""
    out = subprocess.run(['readelf', '--debug-dump=info', str(path)], check=True,
                         capture_output=True, text=True).stdout
    return len(re.findall(r'Abbrev Number: [1-9]', out))


def c_turn(exe: Path, listing: Path) -> dict:
    return json.loads(subprocess.run([str(exe), str(listing)], check=True,
                                     capture_output=True, text=True).stdout)


def objbtf_turn(objs: list[Path]) -> dict:
    env = clean_env(PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE.parent / 'testsupport')]))
    return json.loads(subprocess.run([sys.executable, '-P', '-c', CHILD, *map(str, objs)],
                                     env=env, check=True, capture_output=True,
                                     text=True).stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--every', type=int, default=1, help='every Nth kernel object (default 1)')
    ap.add_argument('--turns', type=int, default=4, help='turns of each side (default 4)')
    ap.add_argument('--build', type=Path, help='kernel O= tree (default: build-kernel.sh)')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    build = args.build or reference_kernel()
    started, load = time.time(), os.getloadavg()[0]
    objs = sample(build, args.every)
    c_runs: list[dict] = []
    ours: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        exe = build_decoder(Path(d))
        listing = Path(d) / 'objects'
        listing.write_text(''.join(f'{p}\n' for p in objs))
        first = c_turn(exe, listing)            # untimed: the DIE count, and a warm cache
        one = Path(d) / 'one'
        one.write_text(f'{objs[0]}\n')
        if c_turn(exe, one)['dies'] != readelf_dies(objs[0]):
            raise SystemExit(f'decode_floor.c counts other DIEs than readelf in {objs[0]}')
        for turn in range(args.turns):
            for side in turn_order(('c', 'objbtf'), turn):
                if side == 'c':
                    c_runs.append(c_turn(exe, listing))
                else:
                    ours.append(objbtf_turn(objs))
                print(f'turn {turn + 1}/{args.turns} {side} done', file=sys.stderr)
    n = len(objs)

    def ms(runs: list[dict], key: str) -> float:
        return 1000 * statistics.median(r[key] for r in runs) / n

    decode, c_decode = ms(ours, 'decode'), ms(c_runs, 'cpu')
    encode, dedup, libbpf = ms(ours, 'encode'), ms(ours, 'dedup'), ms(ours, 'libbpf')
    lines = [
        f'{n} objects with DWARF (every {args.every}th of {build}; {first["dies"]} DIEs, '
        f'{first["dies"] // n} an object); objbtf {ours[0]["code"]}; medians of {args.turns} '
        'turns, CPU per object:',
        f'  decoding the DWARF: objbtf read_units {decode:7.3f} ms, C (decode_floor.c) '
        f'{c_decode:7.3f} ms: {decode / c_decode:.0f}x',
        f'  per-object dedup:   objbtf dedup      {dedup:7.3f} ms, libbpf btf__dedup  '
        f'{libbpf:7.3f} ms: {dedup / libbpf:.1f}x',
        f'  objbtf encode_elf, the whole step in process: {encode:.3f} ms, of which decoding '
        f'{100 * decode / encode:.0f} %',
        f'wall {time.time() - started:.0f} s, load average {load:.1f} at the start, '
        f'{os.getloadavg()[0]:.1f} at the end',
    ]
    report = '\n'.join(lines)
    print(report)
    if not args.no_record:
        record('decoding floor', report)
    return 0


if __name__ == '__main__':
    sys.exit(main())
