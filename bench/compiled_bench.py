#!/usr/bin/env python3
"""Encode CPU with the mypyc-compiled modules against pure Python, in turns;
and the share of it that the kernel-rule check takes (encode checks every
object's BTF before writing it: the robustness issue asks what that costs).

objbtf is installed as a user installs it (a wheel built from this checkout,
compiled by setup.py); the pure variant is the same install with
OBJBTF_PURE=1.  Each run is a fresh process that encodes copies of every Nth
reference-kernel object in process and reports the CPU time of the encoding
alone (imports and copies excluded).  The variants take turns (A B, B A,
...); the report gives each one's median and the paired ratio.  With
--instructions, valgrind also counts each variant's instructions once: a
run over the objects less a run over none (imports only), which the load
of the machine does not change.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from kernel_tree import objects  # noqa: E402
from harness import orders, paired_ratio, record, turn_order  # noqa: E402

#: One run: encode copies of argv's objects, print the CPU seconds it took,
#: those of the kernel-rule check within it, and which modules ran.
RUN = '''
import shutil, sys, time
from pathlib import Path
import objbtf, objbtf.encode.encoder
from objbtf.encode.object_file import encode_path
from objbtf.features import Features
work, cpu, check = Path(sys.argv[1]), 0.0, [0.0]
refuse_invalid = objbtf.encode.encoder._refuse_invalid
def timed_check(btf, source):
    start = time.process_time()
    refuse_invalid(btf, source)
    check[0] += time.process_time() - start
objbtf.encode.encoder._refuse_invalid = timed_check
for i, obj in enumerate(sys.argv[2:]):
    copy = work / f"{i}.o"
    shutil.copyfile(obj, copy)
    start = time.process_time()
    encode_path(str(copy), Features())
    cpu += time.process_time() - start
print(cpu, check[0], objbtf.implementation())
'''
VARIANTS = {'pure': {'OBJBTF_PURE': '1'}, 'compiled': {'OBJBTF_PURE': '0'}}
#: What objbtf.implementation() must say in each variant.
EXPECTED = {'pure': 'pure Python (OBJBTF_PURE)', 'compiled': 'compiled (mypyc)'}


def install(dest: Path) -> Path:
    """This checkout as ``pip install .`` builds it (compiled), unpacked into
    ``dest``."""
    wheels = dest / 'wheels'
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', str(wheels),
                    str(HERE.parent)], check=True, env={**os.environ, 'OBJBTF_MYPYC': '1'})
    (wheel,) = wheels.glob('objbtf-*.whl')
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest / 'site')
    return dest / 'site'


def run(site: Path, variant: str, objs: list[str], work: Path,
        prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'OBJBTF_PURE')}
    env.update(PYTHONPATH=str(site), **VARIANTS[variant])
    # From ``work``: python -c puts its directory first on sys.path.
    r = subprocess.run([*prefix, sys.executable, '-c', RUN, str(work), *objs], env=env,
                       cwd=work, check=True, capture_output=True, text=True)
    ran = r.stdout.split(' ', 2)[2].strip()
    if ran != EXPECTED[variant]:
        sys.exit(f'{variant} run ran {ran}')
    return r


def instructions(site: Path, variant: str, objs: list[str], work: Path) -> int:
    """Instructions of encoding ``objs``: a run over them less one over none."""
    def count(o: list[str]) -> int:
        out = run(site, variant, o, work, ('valgrind', '--tool=cachegrind', '--cache-sim=no',
                                           '--cachegrind-out-file=/dev/null')).stderr
        return int(re.findall(r'I\s+refs:\s+([\d,]+)', out)[-1].replace(',', ''))
    return count(objs) - count([])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', type=Path, default=Path('/var/cache/objbtf/kernel-6.1/build'))
    ap.add_argument('--every', type=int, default=28, help='every Nth kernel object (default 28)')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--instructions', action='store_true', help='count instructions with valgrind')
    ap.add_argument('--no-record', action='store_true', help='do not append to RESULTS.md')
    args = ap.parse_args()
    objs = [str(p) for p in objects(args.build)[::args.every]]
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    check: dict[str, list[float]] = {v: [] for v in VARIANTS}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        site = install(Path(d))
        work = Path(d) / 'work'
        work.mkdir()
        for i in range(args.rounds):
            for variant in turn_order(list(VARIANTS), i):
                total, checking = run(site, variant, objs, work).stdout.split()[:2]
                cpu[variant].append(float(total))
                check[variant].append(float(checking))
        counts = ({v: instructions(site, v, objs, work) for v in VARIANTS}
                  if args.instructions else {})
    ratio = paired_ratio(cpu['pure'], cpu['compiled'], orders(len(cpu['pure'])))
    lines = [f'{len(objs)} objects (every {args.every} of {args.build}), {args.rounds} turns, '
             f'load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end']
    for v in VARIANTS:
        lines.append(f'{v}: encode CPU median {statistics.median(cpu[v]):.2f} s '
                     f'({1000 * statistics.median(cpu[v]) / len(objs):.0f} ms per object; '
                     f'runs {", ".join(f"{c:.2f}" for c in cpu[v])})')
    lines.append(f'compiled / pure CPU: {ratio}')
    for v in VARIANTS:
        share = statistics.median(c / t for c, t in zip(check[v], cpu[v]))
        lines.append(f'{v}: the kernel-rule check {1000 * statistics.median(check[v]) / len(objs):.1f} '
                     f'ms per object, {share:.3f} of the encode CPU')
    if counts:
        lines.append(f'instructions: pure {counts["pure"] / 1e9:.2f} G, compiled '
                     f'{counts["compiled"] / 1e9:.2f} G, pure / compiled '
                     f'{counts["pure"] / counts["compiled"]:.2f}x')
    report = '\n'.join(lines)
    print(report)
    if not args.no_record:
        record('mypyc-compiled encode against pure Python', report)
    return 0


if __name__ == '__main__':
    sys.exit(main())
