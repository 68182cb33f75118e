"""Shared fixtures: real compilers, real oracles, the reference kernel.

A missing oracle fails the test that needs it, with the package to install:
these checks are the point of the suite and must not turn into skips.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kernel_matrix import (BY_FIXTURE, MATRIX, REFERENCE, RELINKED, TIERS, Build, builds_of_tier,
                           rotation_turn, with_needs)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / 'fixtures'
KCONFIG = FIXTURES / 'kconfig'
C_FIXTURES = FIXTURES / 'c'
#: The helpers the tests share with the benchmarks (kernel_tree,
#: saved_commands, libbpf), importable by name: tests and benches share
#: them there and never import each other.
TESTSUPPORT = ROOT / 'testsupport'
if str(TESTSUPPORT) not in sys.path:
    sys.path.insert(0, str(TESTSUPPORT))

# Commands run in their own process unless a test asks for the resident
# server (tests/test_resident.py): a server per tmp directory would linger
# after each test.  OBJBTF_RESIDENT=1 runs the suite through servers.
os.environ.setdefault('OBJBTF_RESIDENT', '0')
# Every kernel the tests build has build number 1: the banner's length is
# the length of a char array in vmlinux's BTF (linux_banner), so a relink
# from #9 to #10 would change the BTF of an unchanged tree.
os.environ.setdefault('KBUILD_BUILD_VERSION', '1')

TOOLS = {'gcc': 'gcc', 'clang': 'clang', 'pahole': 'dwarves', 'pfunct': 'dwarves',
         'bpftool': 'bpftool',
         'readelf': 'binutils', 'ld': 'binutils', 'objcopy': 'binutils',
         'aarch64-linux-gnu-gcc': 'gcc-aarch64-linux-gnu',
         'aarch64-linux-gnu-ld': 'binutils-aarch64-linux-gnu',
         'aarch64-linux-gnu-objcopy': 'binutils-aarch64-linux-gnu',
         's390x-linux-gnu-gcc': 'gcc-s390x-linux-gnu',
         's390x-linux-gnu-ld': 'binutils-s390x-linux-gnu',
         'ld.lld': 'lld', 'llvm-objcopy': 'llvm', 'llvm-nm': 'llvm', 'llvm-ar': 'llvm'}


def need(tool: str) -> str:
    """Path of ``tool``, or fail the test naming the package that has it."""
    path = shutil.which(tool) or (f'/usr/sbin/{tool}' if os.path.exists(f'/usr/sbin/{tool}') else None)
    if path is None:
        pytest.fail(f'{tool} is not installed (Debian package {TOOLS.get(tool, tool)}); '
                    'this test needs it as a compiler or oracle')
    return path


def run(*cmd: str | os.PathLike, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          check=check, **kw)


def objbtf(*args: str | os.PathLike, check: bool = True, cwd: os.PathLike | None = None
           ) -> subprocess.CompletedProcess:
    """Run the CLI as a user would, in a fresh process (in ``cwd`` if given)."""
    env = None
    if cwd is not None:      # the package from this checkout, wherever the command runs
        env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get('PYTHONPATH')])])}
    return run(sys.executable, '-m', 'objbtf', *args, check=check, cwd=cwd, env=env)


def compile_c(compiler: str, src: Path, out: Path, *flags: str) -> Path:
    need(compiler)
    run(compiler, '-g', '-O2', '-c', *flags, '-o', out, src)
    return out


def nested_unions(path: Path, depth: int = 80) -> Path:
    """A C file of one struct holding ``depth`` anonymous unions, each in
    the last: clang nests their DIEs as deep (gcc puts them side by side),
    past the 64 open DIEs a decoder's stack first holds."""
    opened = ''.join(f'{{ int a{i}; union ' for i in range(depth))
    closed = ''.join(f' }} u{i};' for i in range(depth - 1, 0, -1))
    path.write_text(f'struct deep {opened}{{ int z; }} u{depth};{closed} }};\nstruct deep d;\n')
    return path


def encoded_c(compiler: str, src: Path, out: Path, features: str = 'default,global_var',
              *flags: str) -> Path:
    """``src`` compiled (``compile_c``) and encoded with ``features``."""
    compile_c(compiler, src, out, *flags)
    objbtf('encode', '--btf-features', features, out)
    return out


@pytest.fixture(scope='session')
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """objbtf diff's hand-made pair (tests/fixtures/diff): before.o and
    after.o, gcc -O0, encoded with every variable."""
    out = tmp_path_factory.mktemp('pair')
    return tuple(encoded_c('gcc', FIXTURES / 'diff' / f'{side}.c', out / f'{side}.o',
                           'default,global_var', '-O0') for side in ('before', 'after'))


def cache_entries(cache: Path) -> list[Path]:
    """The entries of the encode cache in ``cache``: every file but its
    counters (``encode_cache.STATS``) and its secret (``encode_cache.SECRET``)."""
    from objbtf.encode.cache import SECRET, STATS
    return sorted(p for p in cache.rglob('*') if p.is_file() and p.parent.name != STATS
                  and p != cache / SECRET)


def cache_counts(cache: Path) -> tuple[int, int]:
    """The hits and misses the encode cache in ``cache`` counted: a byte
    each, in its counter files (none yet: 0)."""
    from objbtf.encode.cache import STATS
    counters = [cache / STATS / event for event in ('hits', 'misses')]
    return tuple(p.stat().st_size if p.exists() else 0 for p in counters)


@pytest.fixture(scope='session')
def kernel_build(request) -> Path:
    """The reference kernel's O= build tree: the newest supported Linux
    (kernel_matrix.REFERENCE), the reference config, built through the Kbuild
    integration (every object keeps its DWARF, and carries the BTF objbtf
    encoded)."""
    return request.getfixturevalue(REFERENCE).build


#: The default tier's share of the reference build's objects for the tests
#: that walk every one of them: every SAMPLE-th (CI and the full matrix take all).
SAMPLE = 4


@pytest.fixture(scope='session')
def kernel_sample(request) -> int:
    """Every how many of the reference build's objects (sorted by path, the
    same ones each run) the tests that walk them all take: every one in the
    CI tier and the full matrix, every SAMPLE-th in the default tier."""
    return SAMPLE if request.config.getoption('--tier') == 'default' else 1


def is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture
def kernel_loader():
    """``load_btf`` from objbtf.inspect.kernel_load; fails (not skips) when not root."""
    if not is_root():
        pytest.fail('BPF_BTF_LOAD needs root; run the tests as root (CI does)')
    from objbtf.inspect.kernel_load import load_btf
    return load_btf


@pytest.fixture(scope='session')
def encoded_kernel(kernel_build, tmp_path_factory) -> Path:
    """A copy of the reference build with every object encoded again and
    the temporary vmlinux and the modules linked again (testsupport/kernel_tree.py),
    for the tests that link in place; deleted with the reference build."""
    from kbuild_tree import scratch
    from kernel_tree import encoded_tree
    top = scratch(REFERENCE, tmp_path_factory.mktemp('kernel'))
    return encoded_tree(kernel_build, top / 'build')


@pytest.fixture(scope='session')
def pahole_vmlinux_btf(kernel_build, tmp_path_factory) -> bytes:
    """pahole -J (single-threaded, deterministic) on the reference build's
    vmlinux, which holds its objects' DWARF."""
    need('pahole')
    out = tmp_path_factory.mktemp('pahole') / 'vmlinux.btf'
    run('pahole', '-J', '--btf_gen_floats', '--lang_exclude=rust', '--btf_encode_detached',
        out, kernel_build / 'vmlinux')
    return out.read_bytes()


@pytest.fixture(scope='session')
def newest_pahole(request, tmp_path_factory) -> Path:
    """The newest pahole's binary, built from vendor/ once a run (into
    ``--keep-builds`` DIR when given, and reused from there)."""
    from newest_pahole import built
    for tool in ('cmake', 'make', 'gcc'):
        if shutil.which(tool) is None:
            pytest.fail(f'{tool} is not installed; the newest pahole is built from vendor/ '
                        'with it (scripts/install.sh installs it)')
    kept = request.config.getoption('--keep-builds')
    return built(kept if kept is not None else tmp_path_factory.mktemp('pahole'))


@pytest.fixture(scope='session')
def newest_libbpf(request, tmp_path_factory):
    """The newest libbpf (the vendored pahole's), built once a run (into
    ``--keep-builds`` DIR when given, and reused from there), through
    ctypes: btf__distill_base and the kernel's btf_relocate."""
    from newest_libbpf import Libbpf, built
    for tool in ('make', 'gcc'):
        if shutil.which(tool) is None:
            pytest.fail(f'{tool} is not installed; the newest libbpf is built from vendor/ '
                        'with it (scripts/install.sh installs it)')
    kept = request.config.getoption('--keep-builds')
    return Libbpf(built(kept if kept is not None else tmp_path_factory.mktemp('libbpf')))


# --- the kernel builds: one session fixture per row of kernel_matrix.MATRIX ---

def _build_fixture(row: Build):
    @pytest.fixture(scope='session', name=row.fixture)
    def build(request, tmp_path_factory):
        if row.fixture not in request.config.stash[_PLAN].builds:
            pytest.fail(f'{request.node.nodeid} asked for the {row.fixture} build without saying '
                        'so (a fixture of it, or a parameter naming it): kernel_matrix.py')
        from kbuild_tree import build_row, kept_build
        kept = request.config.getoption('--keep-builds')
        if kept is not None:
            return kept_build(row, kept)
        return build_row(row, tmp_path_factory.mktemp(row.fixture))
    return build


for _row in MATRIX:
    globals()[_row.fixture] = _build_fixture(_row)

#: Fixtures that stand for a build without being its own (the reference tests').
_STANDS_FOR = {'kernel_build': REFERENCE, 'encoded_kernel': REFERENCE,
               'pahole_vmlinux_btf': REFERENCE}


def builds_needed(item: pytest.Item) -> set[str]:
    """The builds a test needs: the build fixtures it asks for, directly or
    through others, and those named by its parameters (a fixture
    parametrized with build fixtures' names), with what they need."""
    names = set(getattr(item, 'fixturenames', ()))
    callspec = getattr(item, 'callspec', None)
    if callspec is not None:
        names |= {v for v in callspec.params.values() if isinstance(v, str)}
    return with_needs({_STANDS_FOR.get(n, n) for n in names} & set(BY_FIXTURE))


@dataclass
class _Plan:
    """What this run builds, and after which test each build's trees (and
    each version's patched source) can go."""
    builds: set[str]
    turn: tuple[str, str]            # rotation_turn's: the ROTATION build, the commit
    last_use: dict[str, str] = field(default_factory=dict)       # build -> test id
    last_of_version: dict[str, str] = field(default_factory=dict)  # version -> test id


_PLAN = pytest.StashKey[_Plan]()


def pytest_addoption(parser):
    parser.addoption('--tier', choices=TIERS, default='default',
                     help='which kernel builds to make and test (tests/kernel_matrix.py): '
                          'default, one (the newest Linux, gcc); ci, one per axis, clang and the '
                          'cross architectures taking turns by commit; full, every build')
    parser.addoption('--keep-builds', type=Path, metavar='DIR',
                     help='make each kernel build in DIR/FIXTURE and keep it there; a later '
                          'run with the same DIR takes a finished one as it is (for working '
                          'on the tests; a change to objbtf or the patches needs a new DIR)')
    parser.addoption('--build', action='append', default=[], choices=sorted(BY_FIXTURE),
                     metavar='FIXTURE', help='also make this build of kernel_matrix.MATRIX '
                                             'and run its tests (repeatable)')


def pytest_configure(config):
    turn = rotation_turn(ROOT)
    wanted = builds_of_tier(config.getoption('--tier'), turn[0]) | set(config.getoption('--build'))
    config.stash[_PLAN] = _Plan(with_needs(wanted), turn)


def pytest_report_collectionfinish(config):
    """The run's builds, and the rotation's turn: printed under -q too, so
    that CI's log says which axis it built."""
    plan = config.stash[_PLAN]
    turn, commit = plan.turn
    lines = [f'kernel builds, tier {config.getoption("--tier")}: '
             + (', '.join(b.fixture for b in MATRIX if b.fixture in plan.builds) or 'none')]
    if config.getoption('--tier') == 'ci':
        lines.append(f'rotating axis this run: {turn} (commit {commit})')
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks each test that needs a build ``kernel``, before ``-m`` reads the
    marks (the tier and the order come last, in the next hook)."""
    for item in items:
        item.stash[_NEEDS] = builds_needed(item)
        if item.stash[_NEEDS]:
            item.add_marker(pytest.mark.kernel)


_NEEDS = pytest.StashKey[set]()


@pytest.hookimpl(trylast=True, specname='pytest_collection_modifyitems')
def pytest_collection_modifyitems_by_tier(config, items):
    """Deselects (does not skip) the tests needing a build outside the run's
    tier, and short of the full tier those marked ``full_only``; runs the
    tests of one build together, in MATRIX's order, so that each build's
    trees can go after its last test (pytest_runtest_teardown)."""
    plan = config.stash[_PLAN]
    order = {b.fixture: i for i, b in enumerate(MATRIX)}
    full = config.getoption('--tier') == 'full'
    kept = [item for item in items if item.stash[_NEEDS] <= plan.builds
            and (full or not item.get_closest_marker('full_only'))
            and (full or not item.get_closest_marker('relinks')
                 or item.stash[_NEEDS] <= set(RELINKED))]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    kept.sort(key=lambda item: max((order[n] for n in item.stash[_NEEDS]), default=-1))
    items[:] = kept
    for item in kept:
        for name in item.stash[_NEEDS]:
            plan.last_use[name] = item.nodeid
            plan.last_of_version[BY_FIXTURE[name].version] = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a build, its trees go; after the last of a
    version, its patched source: a run keeps one or two trees at a time."""
    yield
    if item.config.getoption('--keep-builds') is not None:
        return
    plan = item.config.stash[_PLAN]
    from kbuild_tree import remove_patched_source, remove_scratch
    for name, nodeid in plan.last_use.items():
        if nodeid == item.nodeid:
            remove_scratch(name)
    for version, nodeid in plan.last_of_version.items():
        if nodeid == item.nodeid:
            remove_patched_source(version)
