#!/usr/bin/env python3
"""A 7.x tree's BTF steps: objbtf link against the newest pahole, in turns.

BUILD is an O= directory of Linux 7.x built with ``make OBJBTF=objbtf``
(kbuild-integration; for a distribution-sized kernel, ``kbuild_bench.py
--source 7.2 --config distro`` or ``configure --base defconfig SRC BUILD
bench/distro.config``).  Its objects keep their DWARF, so both tools read
the same objects:

- **vmlinux**: what ``scripts/gen-btf.sh`` runs in each flow, but for
  ``resolve_btfids``, which both flows then run alike.  objbtf: ``objbtf
  link`` with gen-btf.sh's arguments on the tree's ``.tmp_vmlinux1`` (the
  objects' BTF in ``.BTF.objects``), its link cache and types stamp new on
  every run, as in a full build.  pahole: ``pahole -J $(PAHOLE_FLAGS)
  --btf_encode_detached`` with the flags the tree's ``Makefile.btf`` gives
  it (``-j`` as many as this machine's CPUs, as ``make -jN`` gives), on a
  copy of ``vmlinux.unstripped``, which holds the DWARF the stock
  ``.tmp_vmlinux1`` would (the objbtf flow strips ``.tmp_vmlinux1``).
- **modules**: a sample of --modules modules (every k-th of modules.order),
  one after the other, each on the ``.ko`` as its ``ld -r`` left it (its
  saved command run again into a work directory: the tree's ``.ko`` has
  its final BTF): ``objbtf link --base vmlinux --base-index`` (the index
  made by an untimed first link, as Kbuild makes ``.btf.vmlinux.index``
  once) against ``pahole -J $(PAHOLE_FLAGS) --btf_base vmlinux``.

objbtf runs as the console script, in process (OBJBTF_RESIDENT=0): for
the module links, a process each, where Kbuild sends them to its resident
server (resident_bench.py measures that way).  Each
pair runs --repeat times in turns (A B A B); the report gives medians of
wall, CPU (user + system, children included) and memory (the largest PSS
summed over the command's processes, and the largest process's max RSS),
each turn's ratio objbtf/pahole with its range (harness.py), and whether
it can be trusted.  Goals (issue 46, distribution-sized kernel): vmlinux
wall at most 0.25x and max RSS at most 0.5x the newest pahole's.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'testsupport'))
from accounting import Summary, cpu_mark, interleaved, others_share, others_since  # noqa: E402
from harness import Ratio, doubts, paired_ratio, pahole_version, record  # noqa: E402
from install import clean_env  # noqa: E402
from kernel_tree import link_features, make_value, pahole_flags  # noqa: E402
from saved_commands import first_command  # noqa: E402
GOALS = {'vmlinux': {'wall': 0.25, 'rss': 0.5}}


def sampled_modules(build: Path, count: int) -> list[str]:
    order = (build / 'modules.order').read_text().split()
    step = max(1, len(order) // count) if count else len(order) + 1
    return [str(Path(m).with_suffix('.ko')) for m in order[::step][:count]]


def pre_btf_module(build: Path, ko: str, work: Path) -> Path:
    """The module ``ko`` linked again by its saved ``ld -r`` into ``work``,
    before its BTF step."""
    argv = first_command(build / ko)
    out = work / ko
    out.parent.mkdir(parents=True, exist_ok=True)
    argv[argv.index('-o') + 1] = str(out)
    subprocess.run(argv, cwd=build, check=True)
    return out


def ratios(ours: Summary, theirs: Summary) -> dict[str, Ratio]:
    return {key: paired_ratio([getattr(r, key) for r in theirs.runs],
                              [getattr(r, key) for r in ours.runs])
            for key in ('wall', 'cpu', 'pss', 'rss')}


def lines_for(what: str, ours: Summary, theirs: Summary, others_cpu: float) -> list[str]:
    """The report's lines for one pair; ``others_cpu``: the CPU seconds
    other processes used meanwhile (accounting.others_since)."""
    got = ratios(ours, theirs)
    others = others_share(others_cpu, sum(r.wall for r in ours.runs + theirs.runs))
    out = [f'{what}:', f'  newest pahole  {theirs}', f'  objbtf link    {ours}',
           '  objbtf / pahole per turn, median (range): '
           + ', '.join(f'{key} {got[key]}' for key in ('wall', 'cpu', 'pss', 'rss'))]
    for key, goal in GOALS.get(what, {}).items():
        met = 'met' if got[key].median <= goal else 'NOT met'
        out.append(f'  goal {key} <= {goal}: {met}')
    for key in ('wall', 'cpu'):
        why = doubts(got[key], others)
        out.append(f'  {key} ratio: ' + ('NOT trustworthy: ' + '; '.join(why) if why
                                         else 'trustworthy'))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('build', type=Path, help='O= directory of a 7.x tree built with OBJBTF')
    ap.add_argument('--pahole', required=True, metavar='PATH',
                    help='the newest pahole (scripts/build-pahole.sh vendor/dwarves-*.tar.xz PREFIX)')
    ap.add_argument('--objbtf', default='objbtf', help='the objbtf command (default: objbtf)')
    ap.add_argument('--repeat', type=int, default=5, help='turns of each pair (default 5)')
    ap.add_argument('--modules', type=int, default=40,
                    help='modules sampled for the module links (default 40; 0: none)')
    ap.add_argument('--no-record', action='store_true', help='print only; no RESULTS.md entry')
    args = ap.parse_args()
    build = args.build.resolve()
    for needed in ('.tmp_vmlinux1', 'vmlinux.unstripped', 'vmlinux.a', 'modules.order'):
        if not (build / needed).exists():
            sys.exit(f'btf_step_bench: {build / needed} is missing: want a 7.x tree built '
                     'with OBJBTF (kbuild-integration)')
    flags = pahole_flags(build, args.pahole)
    features = link_features(build, flags)
    version = pahole_version(args.pahole)
    env = clean_env(OBJBTF_RESIDENT='0')
    with tempfile.TemporaryDirectory(prefix='btf-step.') as tmp:
        work = Path(tmp)
        vmlinux = work / 'vmlinux'
        shutil.copyfile(build / 'vmlinux.unstripped', vmlinux)
        link = [args.objbtf, 'link', *features, '--quiet', '--objects',
                'vmlinux.a', '--cache', str(work / 'cache'), '--types-stamp', str(work / 'types'),
                '--input-section', '.BTF.objects', '--output', str(work / 'o.BTF'), '.tmp_vmlinux1']
        ours_cmd = ['sh', '-c', f'rm -f {work}/cache {work}/types && exec "$@"', 'sh', *link]
        theirs_cmd = [args.pahole, '-J', *flags, f'--btf_encode_detached={work}/p.BTF', str(vmlinux)]
        mark = cpu_mark()
        theirs, ours = interleaved(args.repeat, [theirs_cmd, ours_cmd], cwd=build, env=env)
        others = others_since(mark)
        report = [f'{build}: Linux {make_value(build, "KERNELVERSION")}, '
                  f'{len((build / "modules.order").read_text().split())} modules; '
                  f'{args.repeat} turns (pahole, objbtf); the peer: {version} '
                  f'with the tree\'s PAHOLE_FLAGS `{" ".join(flags)}`; objbtf link '
                  f'{shlex.join(features)}', '']
        report += lines_for('vmlinux', ours, theirs, others)
        modules = sampled_modules(build, args.modules)
        linked = {ko: pre_btf_module(build, ko, work / 'modules') for ko in modules}
        if modules:
            index = work / 'index'
            ours_m = ' && '.join(shlex.join([args.objbtf, 'link', *features,
                                             '--quiet', '--objects', ko.removesuffix('.ko') + '.mod',
                                             '--base', 'vmlinux', '--base-index', str(index),
                                             '--output', str(work / 'm.BTF'), str(linked[ko])])
                                 for ko in modules)
            theirs_m = ' && '.join(shlex.join([args.pahole, '-J', *flags, '--btf_base', 'vmlinux',
                                               f'--btf_encode_detached={work}/pm.BTF',
                                               str(linked[ko])])
                                   for ko in modules)
            subprocess.run(['sh', '-c', ours_m], cwd=build, env=env, check=True)  # the index
            mark = cpu_mark()
            theirs, ours = interleaved(args.repeat, [['sh', '-c', theirs_m], ['sh', '-c', ours_m]],
                                       cwd=build, env=env)
            report += ['']
            report += lines_for(f'{len(modules)} modules, one after the other, objbtf link a '
                                'process each (Kbuild runs them through the resident server: '
                                'resident_bench.py)', ours, theirs, others_since(mark))
    text = '\n'.join(report)
    print(text)
    if not args.no_record:
        record('BTF steps against the newest pahole', text,
               f'(load average {os.getloadavg()[0]:.1f} at the end)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
