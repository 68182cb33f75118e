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
C_FIXTURES = FIXTURES / 'c'
KERNEL_SCRIPT = ROOT.parent / 'shared' / 'corpus' / 'build-kernel.sh'
KERNEL_DIR = Path(os.environ.get('OBJBTF_KERNEL_DIR', '/var/cache/objbtf/kernel-6.1'))

TOOLS = {'gcc': 'gcc', 'clang': 'clang', 'pahole': 'dwarves', 'bpftool': 'bpftool',
         'readelf': 'binutils', 'ld': 'binutils', 'objcopy': 'binutils'}


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
