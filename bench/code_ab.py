#!/usr/bin/env python3
"""Two checkouts of objbtf on the reference kernel, in turns: the same bytes, and their CPU.

For changes that must alter neither objbtf's output nor its speed.  ``--base
DIR`` is the other checkout (``git worktree add DIR main``, or ``git archive
main | tar -x -C DIR``); this script's own is the other side.  Each run is a
process of its own that imports one checkout and times its work with its own
CPU clock (user + system, imports left out):

- encode: ``encode_elf`` of every Nth object of the stock build (nothing is
  written), after one object that warms the imports up, with the cyclic
  collector paused per object as ``objbtf encode`` pauses it; with
  ``--passes N``, the fastest of N passes over the objects (a spell of
  the machine's other work falls into one pass, and is left out);
- link: ``objbtf link -j 1`` of the temporary vmlinux of an encoded copy of
  the build (testsupport/kernel_tree.py, made once, by this checkout, or by each
  with ``--own-trees``);
- modules: every module's link on that vmlinux's BTF, without and with
  ``--base-index`` (each checkout's index made by an untimed first pass).

Every run also digests all it produced; the two checkouts must produce the
same, and each module the same with and without the index.  With
``--own-trees`` (for a change to what objects carry, such as the chunk's
format) each checkout links a copy of the tree it encoded itself, and the
encode part leaves the chunks out of its digest: all else must be the same.  The checkouts
take turns (A B, then B A, ...) --rounds times; the report gives each side's
median and the median and range of the per-turn ratios, with bench/harness.py's
doubts (the machine's other load among them).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ('encode', 'link', 'modules')


# -- the worker: one checkout, one part -------------------------------------------

def encode_part(build: Path, every: int, chunks: bool,
                passes: int) -> tuple[dict[str, float], str]:
    from kernel_tree import objects
    from objbtf.btf.types import gc_paused
    from objbtf.elf.reader import ElfFile
    from objbtf.encode.encoder import encode_elf, has_dwarf
    from objbtf.features import Features

    features = Features()
    paths = objects(build)[::every]
    digest = hashlib.sha256()

    def encode(path: Path, first: bool) -> None:
        name = str(path.relative_to(build))
        with gc_paused(), ElfFile.open(str(path)) as elf:
            if not has_dwarf(elf):
                return
            enc = encode_elf(elf, features, name)
        if first:
            digest.update(repr((name, enc.raw, enc.chunk if chunks else b'',
                                sorted(enc.relocs.items()), enc.addrs,
                                sorted(enc.facts.items()))).encode())
    encode(paths[0], False)
    fastest = float('inf')
    for n in range(passes):
        start = time.process_time()
        for path in paths:
            encode(path, n == 0)
        fastest = min(fastest, time.process_time() - start)
    return {'encode': fastest}, digest.hexdigest()


def link_part(tree: Path, work: Path) -> tuple[dict[str, float], str]:
    from kernel_tree import TMP_VMLINUX
    from linkdedup.pipeline import link
    from linkdedup.settings import LinkSettings
    from objbtf.features import Features

    out = work / 'vmlinux.btf'
    start = time.process_time()
    link(LinkSettings(str(tree / TMP_VMLINUX), Features(), output=str(out), jobs=1, quiet=True))
    cpu = time.process_time() - start
    return {'link': cpu}, hashlib.sha256(out.read_bytes()).hexdigest()


def modules_part(tree: Path, base: Path, work: Path) -> tuple[dict[str, float], str]:
    from linkdedup.pipeline import link
    from linkdedup.settings import LinkSettings
    from objbtf.features import Features

    features = Features()
    index = work / 'vmlinux.index'
    out = work / 'module.btf'
    digest = hashlib.sha256()
    cpu = {'modules': 0.0, 'modules --base-index': 0.0}

    def run(ko: Path, part: str) -> bytes:
        start = time.process_time()
        link(LinkSettings(str(ko), features, base_path=str(base), output=str(out),
                          base_index=str(index) if part != 'modules' else None, jobs=1,
                          quiet=True))
        cpu[part] += time.process_time() - start
        return out.read_bytes()
    kos = sorted(tree.rglob('*.ko'))
    run(kos[0], 'modules --base-index')             # makes this checkout's index
    cpu['modules --base-index'] = 0.0
    for ko in kos:
        raw = run(ko, 'modules')
        if run(ko, 'modules --base-index') != raw:
            sys.exit(f'{ko}: the split BTF differs with --base-index')
        digest.update(raw)
    return cpu, digest.hexdigest()


def tree_part(build: Path, tree: Path, vmlinux_btf: Path) -> tuple[dict[str, float], str]:
    """Not timed: the encoded copy of the tree, and its vmlinux's BTF for
    the module links."""
    from kernel_tree import TMP_VMLINUX, encoded_tree
    from linkdedup.pipeline import link
    from linkdedup.settings import LinkSettings
    from objbtf.features import Features
    if not (tree / TMP_VMLINUX).exists():
        encoded_tree(build, tree)
    link(LinkSettings(str(tree / TMP_VMLINUX), Features(), output=str(vmlinux_btf), jobs=1,
                      quiet=True))
    return {}, ''


def worker(args: argparse.Namespace) -> int:
    # (tests/ held kernel_tree.py in checkouts older than testsupport/)
    sys.path[:0] = [args.code, str(Path(args.code) / 'testsupport'), str(Path(args.code) / 'tests')]
    work = Path(args.work)
    if args.worker == 'tree':
        cpu, digest = tree_part(Path(args.build), Path(args.tree), Path(args.vmlinux_btf))
    elif args.worker == 'encode':
        cpu, digest = encode_part(Path(args.build), args.every, not args.own_trees,
                                  args.passes)
    elif args.worker == 'link':
        cpu, digest = link_part(Path(args.tree), work)
    else:
        cpu, digest = modules_part(Path(args.tree), Path(args.vmlinux_btf), work)
    import objbtf
    print(json.dumps({'cpu': cpu, 'digest': digest, 'code': objbtf.implementation()}))
    return 0


# -- the driver -------------------------------------------------------------------

def describe(code: Path) -> str:
    r = subprocess.run(['git', '-C', str(code), 'describe', '--always', '--dirty'],
                       capture_output=True, text=True)
    return f'{code} ({r.stdout.strip()})' if r.returncode == 0 else str(code)


def vmlinux_btf(tree: Path) -> Path:
    """Where the BTF of ``tree``'s vmlinux is kept, the module links' base."""
    return tree.with_name(tree.name + '.vmlinux.btf')


def run_worker(args: argparse.Namespace, part: str, code: Path, work: Path, build: Path,
               tree: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), '--worker', part, '--code', str(code),
           '--work', str(work), '--build', str(build), '--tree', str(tree),
           '--every', str(args.every), '--passes', str(args.passes),
           '--vmlinux-btf', str(vmlinux_btf(tree)),
           *(['--own-trees'] if args.own_trees else [])]
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['OBJBTF_RESIDENT'] = '0'
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f'{part} with {code} failed:\n{r.stderr}')
    return json.loads(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--base', help='the checkout to compare this one with')
    ap.add_argument('--every', type=int, default=14,
                    help='encode every Nth object (default 14: 63 of them)')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--passes', type=int, default=1,
                    help='encode: each run takes the fastest of N passes (default 1)')
    ap.add_argument('--parts', default=','.join(PARTS), help='of ' + ','.join(PARTS))
    ap.add_argument('--work', help='keep the encoded tree in this directory (made if '
                                   'missing); default: a temporary one')
    ap.add_argument('--own-trees', action='store_true',
                    help='each checkout links the tree it encoded (objects in another format)')
    ap.add_argument('--no-record', action='store_true')
    for hidden in ('--worker', '--code', '--build', '--tree', '--vmlinux-btf'):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not args.base:
        ap.error('--base is required')
    parts = args.parts.split(',')
    if set(parts) - set(PARTS):
        ap.error(f'--parts: of {",".join(PARTS)}')
    sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / 'testsupport')]
    from accounting import cpu_mark, others_share, others_since
    from encode_bench import reference_kernel
    from kernel_tree import objects
    from harness import doubts, orders, paired_ratio, record, turn_order

    build = reference_kernel()
    sides = {'base': Path(args.base).resolve(), 'this': HERE.parent}
    for code in sides.values():     # byte-compiled, as an installed objbtf is
        subprocess.run([sys.executable, '-m', 'compileall', '-q', str(code / 'objbtf'),
                        str(code / 'linkdedup')], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        trees = {side: work / (f'build-{side}' if args.own_trees else 'build') for side in sides}
        for side, tree in trees.items():
            if {'link', 'modules'} & set(parts) and not vmlinux_btf(tree).exists():
                print(f'preparing an encoded copy of the kernel tree ({tree})...',
                      file=sys.stderr)
                run_worker(args, 'tree', sides[side if args.own_trees else 'this'], work,
                           build, tree)
        cpu: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
        digests: dict[str, set[str]] = {}
        code: dict[str, set[str]] = {s: set() for s in sides}
        others = wall = 0.0
        for r in range(args.rounds):
            order = turn_order(list(sides), r)
            for part in parts:
                for side in order:
                    (work / side).mkdir(exist_ok=True)
                    t0, mark = time.monotonic(), cpu_mark()
                    out = run_worker(args, part, sides[side], work / side, build, trees[side])
                    wall += time.monotonic() - t0
                    others += others_since(mark)
                    for name, seconds in out['cpu'].items():
                        cpu[side].setdefault(name, []).append(seconds)
                    digests.setdefault(part, set()).add(out['digest'])
                    code[side].add(out['code'])
                print(f'round {r + 1}: {part} done', file=sys.stderr)
        share = others_share(others, wall)
        count = len(objects(build)[::args.every])
    differ = [part for part, found in digests.items() if len(found) != 1]
    lines = [f'this: {describe(sides["this"])}; base: {describe(sides["base"])}',
             f'{args.rounds} rounds in turns; encode: one object in {args.every} ({count}), '
             f'the fastest of {args.passes} pass(es) a run; '
             f'CPU of the work in each run\'s own process; code: '
             + '; '.join(f'{side} {", ".join(sorted(c))}' for side, c in code.items()),
             f'{"":22} {"base":>8} {"this":>8}  this / base',]
    found = []
    for name in cpu['this']:
        ratio = paired_ratio(cpu['base'][name], cpu['this'][name],
                             orders(len(cpu['base'][name])))
        lines.append(f'{name:22} {statistics.median(cpu["base"][name]):7.2f}s '
                     f'{statistics.median(cpu["this"][name]):7.2f}s  {ratio}')
        found += [f'{name}: {d}' for d in doubts(ratio, share)]
    lines.append('bytes: ' + (f'DIFFERENT in {", ".join(differ)}' if differ else
                              f'the same in every run ({", ".join(parts)})'))
    lines.append(f'others used {100 * share:.0f}% of the machine\'s CPU; load average '
                 f'{os.getloadavg()[0]:.1f} at the end')
    lines += [f'doubt: {d}' for d in dict.fromkeys(found)]
    report = '\n'.join(lines)
    print(report)
    if not args.no_record:
        record('code A/B', report)
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main())
