"""Shared fixtures: real compilers, real oracles, the reference kernel.

A missing oracle fails the test that needs it, with the package to install:
these checks are the point of the suite and must not turn into skips.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / 'fixtures'
KCONFIG = FIXTURES / 'kconfig'
C_FIXTURES = FIXTURES / 'c'
KERNEL_SCRIPT = ROOT.parent / 'shared' / 'corpus' / 'build-kernel.sh'
KERNEL_DIR = Path(os.environ.get('OBJBTF_KERNEL_DIR', '/var/cache/objbtf/kernel-6.1'))
#: The benchmarks' helpers the tests share (encode_bench.compile_command
#: reruns an object's saved Kbuild command line), importable by name.
BENCH = ROOT / 'bench'
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

# Commands run in their own process unless a test asks for the resident
# server (tests/test_resident.py): a server per tmp directory would linger
# after each test.  OBJBTF_RESIDENT=1 runs the suite through servers.
os.environ.setdefault('OBJBTF_RESIDENT', '0')

TOOLS = {'gcc': 'gcc', 'clang': 'clang', 'pahole': 'dwarves', 'pfunct': 'dwarves',
         'bpftool': 'bpftool',
         'readelf': 'binutils', 'ld': 'binutils', 'objcopy': 'binutils',
         'aarch64-linux-gnu-gcc': 'gcc-aarch64-linux-gnu',
         'aarch64-linux-gnu-ld': 'binutils-aarch64-linux-gnu',
         'aarch64-linux-gnu-objcopy': 'binutils-aarch64-linux-gnu',
         's390x-linux-gnu-gcc': 'gcc-s390x-linux-gnu',
         's390x-linux-gnu-ld': 'binutils-s390x-linux-gnu',
         'ld.lld': 'lld', 'llvm-objcopy': 'llvm'}


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


def cache_entries(cache: Path) -> list[Path]:
    """The entries of the encode cache in ``cache``: every file but its
    counters (``encode_cache.STATS``)."""
    from objbtf.encode_cache import STATS
    return sorted(p for p in cache.rglob('*') if p.is_file() and p.parent.name != STATS)


def cache_counts(cache: Path) -> tuple[int, int]:
    """The hits and misses the encode cache in ``cache`` counted: a byte
    each, in its counter files (none yet: 0)."""
    from objbtf.encode_cache import STATS
    counters = [cache / STATS / event for event in ('hits', 'misses')]
    return tuple(p.stat().st_size if p.exists() else 0 for p in counters)


@pytest.fixture(scope='session')
def kernel_build() -> Path:
    """The reference kernel's O= build tree, built once (about 10 minutes)."""
    if not (KERNEL_DIR / 'READY').exists():
        if not KERNEL_SCRIPT.exists():
            pytest.fail(f'the reference kernel is not built and {KERNEL_SCRIPT} is missing')
        subprocess.run(['bash', str(KERNEL_SCRIPT), str(KERNEL_DIR)], check=True,
                       stdout=subprocess.DEVNULL)
    return KERNEL_DIR / 'build'


def is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture
def kernel_loader():
    """``load_btf`` from objbtf.kernel; fails (not skips) when not root."""
    if not is_root():
        pytest.fail('BPF_BTF_LOAD needs root; run the tests as root (CI does)')
    from objbtf.kernel import load_btf
    return load_btf


@pytest.fixture(scope='session')
def encoded_kernel(kernel_build, tmp_path_factory) -> Path:
    """A copy of the reference build with every object encoded and the
    temporary vmlinux and the modules linked again (kernel_tree.py)."""
    from kernel_tree import encoded_tree
    return encoded_tree(kernel_build, tmp_path_factory.mktemp('kernel') / 'build')


@pytest.fixture(scope='session')
def pahole_vmlinux_btf(kernel_build, tmp_path_factory) -> bytes:
    """pahole -J (single-threaded, deterministic) on the stock pre-BTF vmlinux."""
    need('pahole')
    d = tmp_path_factory.mktemp('pahole')
    out = d / 'vmlinux.btf'
    run('pahole', '-J', '--btf_gen_floats', '--lang_exclude=rust', '--btf_encode_detached',
        out, kernel_build / '.tmp_vmlinux.btf')
    return out.read_bytes()


@pytest.fixture(scope='session')
def kbuild_6_1(tmp_path_factory):
    """Linux 6.1, the Kbuild integration applied, built with OBJBTF once per
    run (kbuild_tree.py: about 10 minutes on 2 cores)."""
    from kbuild_tree import patched_build
    return patched_build(tmp_path_factory.mktemp('kbuild-6.1'), '6.1')


@pytest.fixture(scope='session')
def kbuild_6_1_llvm(tmp_path_factory):
    """Linux 6.1, reference config, built with clang, ld.lld and LLVM's
    binutils (LLVM=1) and OBJBTF, once per run."""
    for tool in ('clang', 'ld.lld', 'llvm-objcopy'):
        need(tool)
    from kbuild_tree import patched_build
    return patched_build(tmp_path_factory.mktemp('kbuild-6.1-llvm'), '6.1', ['LLVM=1'])


@pytest.fixture(scope='session')
def kbuild_6_12_llvm(tmp_path_factory):
    """Linux 6.12, reference config, built with LLVM=1 and OBJBTF, once per run."""
    for tool in ('clang', 'ld.lld', 'llvm-objcopy'):
        need(tool)
    from kbuild_tree import patched_build
    return patched_build(tmp_path_factory.mktemp('kbuild-6.12-llvm'), '6.12', ['LLVM=1'])


@pytest.fixture(scope='session')
def kbuild_6_1_arm64(tmp_path_factory):
    """Linux 6.1 for arm64, cross-compiled by Debian's aarch64 gcc with
    OBJBTF, once per run; the small config of tests/fixtures/kconfig (a
    third of the reference kernel's objects: it says why), with kallsyms."""
    for tool in ('aarch64-linux-gnu-gcc', 'aarch64-linux-gnu-ld'):
        need(tool)
    from kbuild_tree import patched_build
    tree = patched_build(tmp_path_factory.mktemp('kbuild-6.1-arm64'), '6.1',
                         ['ARCH=arm64', 'CROSS_COMPILE=aarch64-linux-gnu-'],
                         fragments=[KCONFIG / 'small.config'])
    assert 'CONFIG_KALLSYMS=y' in tree.config(), 'Kconfig did not keep CONFIG_KALLSYMS'
    return tree


@pytest.fixture(scope='session')
def kbuild_6_1_i386(tmp_path_factory):
    """Linux 6.1 for i386 (32-bit x86: 4-byte pointers, REL relocations,
    percpu variables away from address 0), the small config with SMP, built
    with OBJBTF once per run."""
    from kbuild_tree import patched_build
    tree = patched_build(tmp_path_factory.mktemp('kbuild-6.1-i386'), '6.1',
                         fragments=[KCONFIG / 'small.config', KCONFIG / 'i386.config'])
    config = tree.config()
    assert 'CONFIG_X86_32=y' in config and 'CONFIG_SMP=y' in config, 'not an i386 SMP config'
    return tree


@pytest.fixture(scope='session')
def kbuild_6_1_s390x(tmp_path_factory):
    """Linux 6.1 for s390x (big-endian), cross-compiled with OBJBTF, the
    small config; only with --s390x (tests marked s390x: not in CI)."""
    for tool in ('s390x-linux-gnu-gcc', 's390x-linux-gnu-ld'):
        need(tool)
    from kbuild_tree import patched_build
    return patched_build(tmp_path_factory.mktemp('kbuild-6.1-s390x'), '6.1',
                         ['ARCH=s390', 'CROSS_COMPILE=s390x-linux-gnu-'],
                         fragments=[KCONFIG / 'small.config'])


@pytest.fixture(scope='session')
def kbuild_6_1_lto(tmp_path_factory):
    """Linux 6.1 with CONFIG_LTO_CLANG_THIN (LLVM=1; the small config of
    tests/fixtures/kconfig/lto-small.config), made with OBJBTF set; only with
    --build lto (tests marked lto: not in CI)."""
    for tool in ('clang', 'ld.lld', 'llvm-nm', 'llvm-ar'):
        need(tool)
    from kbuild_tree import patched_build
    tree = patched_build(tmp_path_factory.mktemp('kbuild-6.1-lto'), '6.1', ['LLVM=1'],
                         fragments=[KCONFIG / 'lto-small.config'])
    assert 'CONFIG_LTO_CLANG_THIN=y' in tree.config(), 'Kconfig did not keep CONFIG_LTO_CLANG_THIN'
    return tree


#: Tests that build a whole extra kernel and are not part of the default
#: run (marker -> what it builds); each runs with ``--build MARKER``.
OPT_IN_BUILDS = {
    's390x': 'Linux for s390x (big-endian), cross-compiled',
    'lto': 'Linux with CONFIG_LTO_CLANG_THIN (bitcode objects: the pahole fallback)',
}


def pytest_addoption(parser):
    parser.addoption('--build', action='append', default=[], choices=sorted(OPT_IN_BUILDS),
                     help='also run the tests of an extra kernel build: '
                          + '; '.join(f'{k}: {v}' for k, v in OPT_IN_BUILDS.items())
                          + ' (not in CI: see README)')
    parser.addoption('--s390x', action='store_true', help='the same as --build s390x')


def pytest_collection_modifyitems(config, items):
    """Tests of an opt-in build are deselected (not skipped) unless asked for."""
    wanted = set(config.getoption('--build'))
    if config.getoption('--s390x'):
        wanted.add('s390x')
    off = set(OPT_IN_BUILDS) - wanted
    kept = [item for item in items if not any(item.get_closest_marker(m) for m in off)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(scope='session')
def kbuild_6_1_gbtf(tmp_path_factory):
    """Linux 6.1 built as kbuild_6_1 but DWARF-less (OBJBTF_GBTF=1, patch 4),
    once per run, through the quickest client (``objbtf server command``,
    the C one), as the DWARF-less benchmark runs it.  OBJBTF goes to
    configure too: Kconfig reads both."""
    from kbuild_tree import patched_build, quick_command
    return patched_build(tmp_path_factory.mktemp('kbuild-6.1-gbtf'), '6.1',
                         (f'OBJBTF={quick_command()}', 'OBJBTF_GBTF=1'))


@pytest.fixture(scope='session')
def kbuild_6_1_gbtf_kallsyms(tmp_path_factory):
    """Linux 6.1 for x86_64 built DWARF-less as kbuild_6_1_gbtf is, but in
    the small config (small.config, x86_64.config), which has kallsyms: then
    the BTF link is the first kallsyms link, which the switch strips of the
    objects' BTF instead of removing it.  About a third of the reference
    kernel's objects."""
    from kbuild_tree import patched_build, quick_command
    tree = patched_build(tmp_path_factory.mktemp('kbuild-6.1-gbtf-kallsyms'), '6.1',
                         (f'OBJBTF={quick_command()}', 'OBJBTF_GBTF=1'),
                         fragments=[KCONFIG / 'small.config', KCONFIG / 'x86_64.config'])
    assert 'CONFIG_KALLSYMS=y' in tree.config(), 'Kconfig did not keep CONFIG_KALLSYMS'
    return tree


@pytest.fixture(scope='session')
def kbuild_6_12_gbtf(tmp_path_factory):
    """Linux 6.12 built DWARF-less as kbuild_6_1_gbtf is (its patch 5)."""
    from kbuild_tree import patched_build, quick_command
    return patched_build(tmp_path_factory.mktemp('kbuild-6.12-gbtf'), '6.12',
                         (f'OBJBTF={quick_command()}', 'OBJBTF_GBTF=1'))


@pytest.fixture(scope='session')
def kbuild_6_12(tmp_path_factory):
    """Linux 6.12 (Debian's linux-source-6.12), the Kbuild integration
    applied, built with OBJBTF once per run (kbuild_tree.py)."""
    from kbuild_tree import patched_build
    return patched_build(tmp_path_factory.mktemp('kbuild-6.12'), '6.12')
