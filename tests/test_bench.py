"""The benchmarks' own machinery: CPU accounting of daemons, phases, the
projection and the harness's turns and trust rules (bench/).  Nothing here
is timed: the accounting tests check that CPU a process really burned is
found.  The one test module that imports benches: the others share their
helpers with the benches through testsupport/."""
from __future__ import annotations

import ast
import io
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / 'bench'
sys.path.insert(0, str(BENCH))

from kbuild_bench import Timeline  # noqa: E402
from projection import Phase, build_wall, phase_wall, split  # noqa: E402
from harness import (OTHERS_LIMIT, doubts, machine, orders, paired_ratio, record,  # noqa: E402
                     rotated, turn_order)

ROOT = BENCH.parent

#: A daemon as the resident server is one: started by a command that exits
#: at once, in a session of its own; it burns BURN s of CPU and then logs
#: its CPU as objbtf's server does (LOGGED overrides what it logs).
DAEMON = '''
import os, resource, sys, time
if os.fork() == 0:
    os.setsid()
    t = time.process_time()
    while time.process_time() - t < {burn}: pass
    r = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {logged} if {logged} is not None else r.ru_utime + r.ru_stime
    with open({log!r}, 'a') as f:
        f.write(f'objbtf-server pid={{os.getpid()}} requests=7 user={{cpu:.3f}} sys=0.000\\n')
    os._exit(0)
'''

#: Runs in a process of its own, which becomes a subreaper (pytest must not).
PROBE = '''
import json, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, {bench!r})
from accounting import become_subreaper, orphans, settle_servers, tree_cpu
if {subreaper}:
    become_subreaper()
before = tree_cpu()
subprocess.run([sys.executable, '-c', {daemon!r}], check=True)
started = orphans()
for _ in range(0 if {subreaper} else 200):   # init's child: wait for its log line
    if Path({log!r}).exists() and Path({log!r}).read_text():
        break
    time.sleep(0.1)
servers = settle_servers(None, Path('.'), {{}}, Path({log!r}))
print(json.dumps({{'orphans': len(started), 'cpu': tree_cpu() - before,
                  'servers': servers.as_dict()}}))
'''


def probe(tmp_path: Path, burn: float, logged: float | None = None, subreaper: bool = True) -> dict:
    log = tmp_path / 'server.log'
    daemon = DAEMON.format(burn=burn, logged=logged, log=str(log))
    script = PROBE.format(bench=str(BENCH), subreaper=subreaper, daemon=daemon, log=str(log))
    out = subprocess.run([sys.executable, '-c', script], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_subreaper_counts_a_daemons_cpu(tmp_path):
    got = probe(tmp_path, burn=0.5)
    assert got['orphans'] == 1
    assert got['cpu'] >= 0.5
    assert got['servers']['processes'] == 1 and got['servers']['requests'] == 7
    assert abs(got['servers']['cpu'] - got['servers']['logged_cpu']) < 0.1
    assert got['servers']['problems'] == []


def test_without_subreaper_the_daemons_cpu_is_missed_and_said(tmp_path):
    got = probe(tmp_path, burn=0.3, subreaper=False)
    assert got['orphans'] == 0
    assert got['cpu'] < 0.3
    assert any('was not reaped by the bench' in p for p in got['servers']['problems'])


def test_a_log_that_disagrees_with_the_reaped_cpu_is_said(tmp_path):
    got = probe(tmp_path, burn=0.2, logged=5.0)
    assert any('logged' in p and 'reaped' in p for p in got['servers']['problems'])


def test_amdahl_split_gives_back_the_measurement():
    # W = s + q/2, C = s + q: with W = 10, C = 15, q = 10 and s = 5.
    assert split(Phase(wall=10, cpu=15, commands=100), jobs=2) == (5, 10)
    assert phase_wall('compile', Phase(10, 15, 100), jobs=2, cpus=2) == 10
    assert phase_wall('compile', Phase(10, 15, 100), jobs=2, cpus=8) == 5 + 10 / 8
    # one command cannot use more than one CPU
    assert phase_wall('modules', Phase(10, 15, 1), jobs=2, cpus=64) == 15
    # the link chain is serial: its wall on any machine
    assert phase_wall('link', Phase(4, 6, 9), jobs=2, cpus=64) == 4
    # a phase slower than its CPU (waiting) is all serial
    assert split(Phase(wall=10, cpu=8, commands=5), jobs=2) == (8, 0)
    assert build_wall({'compile': Phase(10, 15, 100), 'link': Phase(4, 6, 9)}, 2, 8) == 5 + 10 / 8 + 4
    with pytest.raises(ValueError):
        split(Phase(1, 1, 1), jobs=1)


def test_trust_rules():
    one = paired_ratio([100], [90])
    assert (one.median, one.turns) == (0.9, 1)
    assert any('one turn' in d for d in doubts(one, 0.0))
    two = doubts(paired_ratio([100, 110], [80, 88]), 0.0)     # agreeing, yet only two
    assert len(two) == 1 and 'two turns' in two[0]
    steady = paired_ratio([100, 110, 90], [80, 88, 72])
    assert steady.median == pytest.approx(0.8) and doubts(steady, 0.0) == []
    noisy = paired_ratio([100, 100, 100], [80, 120, 95])
    assert any('disagree' in d for d in doubts(noisy, 0.0))
    assert any('other processes' in d for d in doubts(steady, OTHERS_LIMIT + 0.01))


def test_alternating_turns_weigh_both_orders_alike():
    # The DWARF-less build's CPU in the kbuild run of 2026-11-29 08:36:
    # stock 719.4, 626.3, 679.9 s; gbtf 554.9, 602.9, 518.4 s; orders A B, B A, A B.
    stock, gbtf = [719.358, 626.292, 679.87], [554.946, 602.892, 518.441]
    plain = paired_ratio(stock, gbtf)
    balanced = paired_ratio(stock, gbtf, [0, 1, 0])
    first_order = (554.946 / 719.358 + 518.441 / 679.87) / 2
    assert plain.median == pytest.approx(554.946 / 719.358)
    assert balanced.median == pytest.approx((first_order + 602.892 / 626.292) / 2)
    assert (balanced.low, balanced.high) == (plain.low, plain.high)
    assert any('disagree' in d for d in doubts(balanced, 0.0))
    assert doubts(plain, 0.0) == []         # what the plain median let through
    one_order = paired_ratio([100, 100, 100], [80, 90, 85], [0, 0, 0])
    assert one_order.median == pytest.approx(0.85)


#: The quiet output of a 6.1 `make vmlinux modules` after touching kernel/fork.c.
REBUILD = '''\
  CALL    scripts/checksyscalls.sh
  CC      kernel/fork.o
  AR      kernel/built-in.a
  AR      built-in.a
  AR      vmlinux.a
  LD      vmlinux.o
  MODPOST Module.symvers
  LD      .tmp_vmlinux.btf
  BTF     .btf.vmlinux.bin.o
  LD      vmlinux
  BTFIDS  vmlinux
make[2]: Nothing to be done for 'foo'.
  BTF [M] drivers/net/dummy.ko
  BTF [M] drivers/net/tun.ko
  BTF [M] drivers/net/veth.ko
'''


def test_timeline_cuts_make_output_into_phases():
    timeline = Timeline(io.StringIO())
    for line in REBUILD.splitlines():
        timeline.line(line, 0.0)
    phases = timeline.phases(wall=100.0, cpu=50.0)
    assert list(phases) == ['compile', 'link', 'modules']
    assert [p[2] for p in phases.values()] == [4, 7, 3]
    assert sum(p[0] for p in phases.values()) == pytest.approx(100.0, abs=0.01)
    assert sum(p[1] for p in phases.values()) == pytest.approx(50.0, abs=0.01)


def test_timeline_without_a_link_chain():
    timeline = Timeline(io.StringIO())
    for line in textwrap.dedent('''\
            CC [M]  drivers/net/veth.o
            MODPOST Module.symvers
            LD [M]  drivers/net/veth.ko''').splitlines():
        timeline.line('  ' + line, 0.0)
    assert list(timeline.phases(wall=10.0, cpu=9.0)) == ['compile', 'modules']


#: objbtf's real resident server, in a process of its own that becomes a
#: subreaper: three encodes through it, then the bench's settling.
SERVED = '''
import json, os, shutil, subprocess, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
from accounting import become_subreaper, orphans, settle_servers, tree_cpu
tree, env = Path({tree!r}), dict(os.environ, **{env!r})
objbtf = [sys.executable, '-m', 'objbtf']
become_subreaper()
before = tree_cpu()
for n in range(3):
    shutil.copy(tree / 'kinds.o', tree / f'{{n}}.o')
    subprocess.run(objbtf + ['encode', '-q', f'{{n}}.o'], cwd=tree, env=env, check=True)
alive = orphans()
servers = settle_servers(objbtf, tree, env, Path(env['OBJBTF_SERVER_LOG']))
print(json.dumps({{'alive': len(alive), 'cpu': tree_cpu() - before - servers.stop_cpu,
                  'server': servers.as_dict(), 'left': orphans()}}))
'''


def test_the_resident_servers_cpu_is_counted_and_checked(tmp_path):
    from conftest import C_FIXTURES, ROOT, compile_c
    compile_c('gcc', C_FIXTURES / 'kinds.c', tmp_path / 'kinds.o')
    runtime = Path(tempfile.mkdtemp(prefix='ob', dir='/tmp'))   # socket paths stay short
    try:
        env = {'PYTHONPATH': str(ROOT), 'XDG_RUNTIME_DIR': str(runtime), 'OBJBTF_RESIDENT': '1',
               'OBJBTF_SERVER_LOG': str(tmp_path / 'server.log')}
        script = SERVED.format(bench=str(BENCH), tree=str(tmp_path), env=env)
        got = json.loads(subprocess.run([sys.executable, '-c', script], check=True,
                                        capture_output=True, text=True).stdout)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    assert got['alive'] == 1                  # the server, reparented to the probe
    server = got['server']
    assert server['processes'] == 1 and server['requests'] == 3
    assert server['problems'] == []           # stopped, reaped, its log line agrees
    assert server['cpu'] > 0 and got['cpu'] >= server['cpu']
    assert got['left'] == []


@pytest.mark.parametrize('compiler, flags', [('gcc', ('-gdwarf-4',)), ('gcc', ('-gdwarf-5',)),
                                             ('clang', ('-gdwarf-5',))])
def test_the_c_decoding_floor_decodes_every_die(tmp_path, compiler, flags):
    """decode_floor.c, the C side of bench/decode_floor.py, must walk every
    DIE (readelf's count) and stop on nothing: a decoder that skipped some
    would make the floor look lower than it is."""
    from conftest import C_FIXTURES, compile_c
    from decode_floor import build_decoder, c_turn, readelf_dies
    exe = build_decoder(tmp_path)
    objs = [compile_c(compiler, C_FIXTURES / name, tmp_path / f'{Path(name).stem}.o', *flags)
            for name in ('kinds.c', 'scopes.c', 'tags.c')]
    listing = tmp_path / 'objects'
    listing.write_text(''.join(f'{o}\n' for o in objs))
    got = c_turn(exe, listing)
    assert got['objects'] == 3
    assert got['dies'] == sum(readelf_dies(o) for o in objs) > 100


def test_turns_alternate_and_rotate():
    assert [turn_order('AB', t) for t in range(3)] == [['A', 'B'], ['B', 'A'], ['A', 'B']]
    assert [''.join(rotated('ABC', t)) for t in range(4)] == ['ABC', 'BCA', 'CAB', 'ABC']
    assert orders(3) == [0, 1, 0]


def test_a_record_names_its_command_date_and_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, 'argv', ['bench/encode_bench.py', '--every', '9'])
    results = tmp_path / 'RESULTS.md'
    record('encode', 'figures', results=results)
    text = results.read_text()
    assert text.startswith('\n## encode, 20')
    assert '`python3 bench/encode_bench.py --every 9`' in text
    assert f'Machine: {machine()}.' in text and '```\nfigures\n```' in text


def imported(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports, wherever in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split('.')[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split('.')[0])
    return names


def test_benches_and_tests_share_helpers_through_testsupport_only():
    """No bench imports a module of tests/, and no test (but this one) a bench."""
    tests = {p.stem for p in (ROOT / 'tests').glob('*.py')}
    benches = {p.stem for p in BENCH.glob('*.py')}
    assert not tests & benches and not {p.stem for p in (ROOT / 'testsupport').glob('*.py')} \
        & (tests | benches)
    for bench in BENCH.glob('*.py'):
        assert not imported(bench) & tests, bench.name
    for test in (ROOT / 'tests').glob('*.py'):
        if test.name != 'test_bench.py':
            assert not imported(test) & benches, test.name
    for helper in (ROOT / 'testsupport').glob('*.py'):
        assert not imported(helper) & (tests | benches), helper.name


def test_command_ab_runs_the_compile_lines_kbuild_runs(kernel_build):
    """command_ab's two variants of an object's line are Kbuild's: the saved
    line of the reference build (made with OBJBTF) less its post-step, and
    that line again when the bench appends the post-step with the client
    ``objbtf server command`` gives."""
    from command_ab import stock_line, with_encode
    from compile_ab import objects_in
    from install import clean_env, quick_client
    from kbuild_tree import objbtf_command
    from saved_commands import saved_command
    client = shlex.join(quick_client(objbtf_command(), clean_env()))
    objects = objects_in(kernel_build, ['kernel'])
    assert len(objects) > 20
    for obj in objects:
        saved = saved_command(obj)
        stock, flags = stock_line(saved)
        assert flags is not None and ' encode ' not in stock, saved
        assert stock_line(stock) == (stock, None)
        assert with_encode(stock, client, flags, str(obj.relative_to(kernel_build))) == saved


# The build-graph replay (bench/buildgraph.py, bench/replay.py).

def job(id, start, end, parent=None, cmd='true', after=(), kind='leaf', compile=False, parts=None):
    from buildgraph import Job
    return Job(id=id, parent=parent, start=start, end=end, cpu=end - start, status=0, cwd='/',
               cmd=cmd, kind=kind, compile=compile, after=[(a, 'file x') for a in after],
               parts=parts or {})


def graph(*jobs, wall=None):
    from buildgraph import Graph
    return Graph({'wall': wall if wall is not None else max(j.end for j in jobs)}, list(jobs))


def test_a_chain_takes_its_length_on_any_number_of_cpus():
    from replay import replay
    g = graph(job(0, 0, 1), job(1, 1, 3, after=[0]), job(2, 3, 6, after=[1]))
    assert [replay(g, n) for n in (1, 2, 64)] == [6, 6, 6]


def test_a_fork_join_spreads_over_the_cpus():
    from replay import replay
    forks = [job(i, 1 + 2 * (i - 1), 3 + 2 * (i - 1), after=[0]) for i in range(1, 5)]
    g = graph(job(0, 0, 1), *forks, job(5, 9, 10, after=range(1, 5)))
    assert replay(g, 1) == 10 and replay(g, 2) == 6 and replay(g, 4) == 4 and replay(g, 128) == 4
    assert replay(g, 2, priority='critical') == 6


def test_critical_path_first_beats_makes_order_where_make_starts_the_short_jobs_first():
    from replay import replay
    g = graph(job(0, 0, 1), job(1, 0, 1), job(2, 1, 4), job(3, 4, 7, after=[2]))
    assert replay(g, 2) == 7                        # S1 S2, then the chain
    assert replay(g, 2, priority='critical') == 6   # the chain at once, S1 S2 beside it


def test_a_recursive_make_is_its_parse_then_its_jobs_then_its_end():
    from replay import replay
    g = graph(job(0, 0, 5, cmd='make -f sub.mk', kind='make'),
              job(1, 1, 2.5, parent=0), job(2, 2.5, 4.5, parent=0), job(3, 5, 6, after=[0]))
    assert replay(g, 1) == 1 + 1.5 + 2 + 0.5 + 1
    assert replay(g, 2) == 1 + 2 + 0.5 + 1


def test_a_script_that_runs_make_keeps_its_own_work_between_in_turn():
    from replay import replay
    g = graph(job(0, 0, 10, cmd='scripts/link-vmlinux.sh', kind='script'),
              job(1, 2, 3, parent=0), job(2, 7, 8, parent=0))
    assert replay(g, 1) == replay(g, 8) == 10


def test_the_farm_compiles_remotely_and_encodes_locally():
    from replay import replay
    compiles = [job(i, 2 * i, 2 * i + 2, compile=True, parts={'objbtf encode': 0.5})
                for i in range(4)]
    g = graph(*compiles)
    assert replay(g, 1) == 8
    assert replay(g, (1, 4)) == 1.5 + 4 * 0.5       # four remote at once, then encodes in turn
    assert replay(g, (4, 4)) == 2.0
    stock = graph(*[job(i, 2 * i, 2 * i + 2, compile=True) for i in range(4)])
    assert replay(stock, (1, 4)) == 2.0             # nothing local but the (zero) rest


def test_objbtf_free_replays_objbtf_s_parts_at_no_time():
    """The floor of what objbtf's own speed can change: its encodes inside
    the compiles and its link inside a link line take no time, what else
    those lines do keeps its time, on one CPU as on the farm."""
    from replay import replay
    compiles = [job(i, 2 * i, 2 * i + 2, compile=True, parts={'objbtf encode': 0.5})
                for i in range(4)]
    link = job(4, 8, 11, after=range(4), parts={'objbtf link': 1.0})
    g = graph(*compiles, link)
    assert replay(g, 1) == 11
    assert replay(g, 1, objbtf_free=True) == 4 * 1.5 + 2
    assert replay(g, (1, 4), objbtf_free=True) == 1.5 + 2       # nothing left to do locally


def test_kbuilds_barriers_are_added_and_can_be_left_out():
    from buildgraph import analyse
    from replay import replay
    jobs = [job(0, 0, 100, cmd='make -C /build -f /src/Makefile vmlinux modules', kind='make'),
            job(1, 1, 3, parent=0, cmd='sh scripts/checksyscalls.sh'),
            job(2, 3, 10, parent=0, cmd='make -f /src/scripts/Makefile.build obj=kernel need-builtin=1'),
            job(3, 3, 12, parent=0, cmd='make -f /src/scripts/Makefile.build obj=mm need-builtin=1'),
            job(4, 12, 20, parent=0, cmd='make -f /src/scripts/Makefile.modpost'),
            job(5, 20, 30, parent=0, cmd='make -f /src/scripts/Makefile.vmlinux'),
            job(6, 30, 40, parent=0, cmd='make -f /src/scripts/Makefile.modfinal'),
            job(7, 3.1, 4, parent=2, cmd='gcc -c -o kernel/fork.o kernel/fork.c'),
            job(8, 4.5, 9, parent=2,
                cmd='make -f /src/scripts/Makefile.build obj=kernel/sched need-builtin=1')]
    for j in jobs:
        j.after = []
    g = analyse(jobs, {'wall': 100})
    assert (1, 'barrier prepare') in g.jobs[2].after and (1, 'barrier prepare') in g.jobs[3].after
    assert (4, 'barrier modpost') in g.jobs[5].after and (4, 'barrier modpost') in g.jobs[6].after
    assert g.meta['barrier_edges'] == {'prepare': 2, 'modpost': 2}
    assert g.jobs[8].after == []         # Makefile.build's own descents: among its compiles
    assert replay(g, 8, barriers=False) < replay(g, 8)


TINY = '''\
X := $(shell echo parsing)
all: final.a
gen.h:
\techo '#define N 3' > gen.h
sub: gen.h
\t$(MAKE) -f sub.mk
lib.a: sub
\tar rcs lib.a a.o b.o c.o d.o; echo 'cmd_lib.a := ar' > .lib.a.cmd
final.a: lib.a
\tcp lib.a final.a
.PHONY: all sub
'''
TINY_SUB = '''\
all: a.o b.o c.o d.o
%.o: %.c
\tgcc -O2 -Wp,-MMD,.$@.d -c -o $@ $<; { echo 'source_$@ := $<'; echo 'deps_$@ := \\\\'; \\
\tsed -e '1s/^[^:]*://' -e 's/\\\\$$//' .$@.d | tr ' ' '\\n' | grep . | sed 's/$$/ \\\\/'; \\
\techo; } > .$@.cmd
'''


def test_a_real_make_recorded_and_replayed(tmp_path):
    """A tiny make like Kbuild's: a generated header, a sub-make that
    compiles four files (their .cmd files name the header), an archive
    whose .cmd file names it, a copy of it."""
    from buildgraph import record
    from replay import replay
    tree = tmp_path / 'tree'
    tree.mkdir()
    (tree / 'Makefile').write_text(TINY)
    (tree / 'sub.mk').write_text(TINY_SUB)
    for name in 'abcd':
        (tree / f'{name}.c').write_text(f'#include "gen.h"\nint {name}(int x) {{ return x * N; }}\n')
    walls, graphs = [], []
    for n in range(3):
        g = record(['make', '-s', '-C', str(tree), '-B', '-j1'], tmp_path / f'g{n}.jsonl', 1)
        graphs.append(g)
        walls.append(g.meta['wall'])
    g = graphs[-1]
    by_cmd = {j.cmd.split()[0]: j for j in g.jobs}
    assert not any('parsing' in j.cmd for j in g.jobs)          # $(shell ...) is no job
    sub, ar, cp = by_cmd['make'], by_cmd['ar'], by_cmd['cp']
    compiles = [j for j in g.jobs if j.compile]
    assert len(compiles) == 4 and all(j.parent == sub.id for j in compiles) and sub.kind == 'make'
    assert [w for w, _ in sub.after] == [by_cmd['echo'].id]    # the header its compiles read
    assert [w for w, _ in ar.after] == [sub.id]                 # the objects, lifted to the sub-make
    assert [w for w, _ in cp.after] == [ar.id]                  # lib.a, named by its .cmd file
    assert sub.after[0][1] == f'file {tree / "gen.h"}'
    replayed = sorted(replay(gr, 1) / gr.meta['wall'] for gr in graphs)
    assert 0.9 < replayed[1] < 1.1, replayed      # 1.01 on a loaded 2-CPU machine
    assert replay(g, 4) < replay(g, 1)


#: A make that stands for Kbuild in kbuild_bench.timed_make: it builds
#: vmlinux and modules, and runs OBJBTF_COMMAND after each compile.
FAKE_KBUILD = '''\
vmlinux: a.o b.o
\tcat a.o b.o > vmlinux.tmp; mv vmlinux.tmp vmlinux
%.o: %.c
\tgcc -c -o $@ $<; $(OBJBTF_COMMAND) encode -q $@
modules: vmlinux
\t@:
'''

RECORDED = '''
import json, os, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
from accounting import become_subreaper
from buildgraph import read_graph, wrapper
from kbuild_bench import Recorder, timed_make
become_subreaper()
tmp = Path({tmp!r})
recorder = Recorder(wrapper(tmp / 'jobrec'), 'true', {{'config': 'fake', 'variant': 'objbtf',
                                                      'step': 'full', 'turn': 0}})
*_, graph = timed_make(tmp / 'src', tmp / 'build', 2, ['OBJBTF=x'], dict(os.environ), None,
                       tmp / 'make.log', recorder)
g = read_graph(Path(graph))
print(json.dumps({{'meta': g.meta, 'jobs': [[j.cmd, j.compile, j.parts, j.after] for j in g.jobs]}}))
'''


def test_kbuild_bench_records_each_builds_graph_with_objbtfs_parts(tmp_path):
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'Makefile').write_text(FAKE_KBUILD)
    for name in 'ab':
        (src / f'{name}.c').write_text(f'int {name};\n')
    out = subprocess.run([sys.executable, '-c', RECORDED.format(bench=str(BENCH), tmp=str(tmp_path))],
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    assert got['meta']['variant'] == 'objbtf' and got['meta']['jobs_flag'] == 2
    compiles = [j for j in got['jobs'] if j[1]]
    assert len(compiles) == 2 and all(set(j[2]) == {'objbtf encode'} for j in compiles)
    link = next(j for j in got['jobs'] if j[0].startswith('cat'))
    assert len(link[3]) == 2                    # after both compiles


def test_the_replay_reads_kbuild_bench_records_and_finds_moved_graphs(tmp_path):
    from buildgraph import write_graph
    from replay import from_records
    write_graph(graph(job(0, 0, 2), job(1, 2, 3, after=[0])), tmp_path / 'a.graph.jsonl.gz')
    records = tmp_path / 'records.jsonl'
    records.write_text(json.dumps({'run': {'jobs': 2}}) + '\n'
                       + json.dumps({'config': 'reference', 'variant': 'stock', 'step': 'full',
                                     'wall': 3.1, 'graph': '/gone/a.graph.jsonl.gz'}) + '\n'
                       + json.dumps({'failed': 'objbtf', 'why': 'test'}) + '\n')
    [got] = from_records([records])
    assert (got.config, got.variant, got.step, got.jobs, got.wall) == ('reference', 'stock', 'full', 2, 3.1)
    assert len(got.graph.jobs) == 2 and got.graph.jobs[1].after == [(0, 'file x')]
