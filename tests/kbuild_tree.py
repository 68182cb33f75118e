"""A Linux source tree with objbtf's Kbuild integration applied, configured
as the reference kernel and built with ``make OBJBTF=...``.

Shared by every test that builds a kernel through the integration: one
row of kernel_matrix.MATRIX (a version of the source, Debian's
``linux-source-VERSION``, a toolchain, an architecture, a mode, config
fragments) makes one build.  ``build_row`` makes it; a session fixture of
conftest.py calls it once per run and hands the result to the tests, which
may ``make`` in it again with the same arguments.
"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import KCONFIG, ROOT, need, objbtf, run
from kernel_matrix import Build
from objbtf.source_digest import source_digest

INTEGRATION = ROOT / 'kbuild-integration'


def _patch_targets(version: str) -> list[tuple[str, str]]:
    """(the file before, the file after) of every file kbuild-integration's
    patches for ``version`` touch, in order: '/dev/null' before for a new one."""
    out: list[tuple[str, str]] = []
    for patch in sorted((INTEGRATION / f'linux-{version}').glob('*.patch')):
        lines = patch.read_text().splitlines()
        for before, after in zip(lines, lines[1:]):
            if before.startswith('--- ') and after.startswith('+++ b/'):
                pair = (before[4:].split()[0].removeprefix('a/'), after[6:].split()[0])
                if pair not in out:
                    out.append(pair)
    return out


def patched_files(version: str) -> list[str]:
    """The existing files of a Linux source that kbuild-integration's
    patches for ``version`` change, in order."""
    return [after for before, after in _patch_targets(version) if before != '/dev/null']


def added_files(version: str) -> list[str]:
    """The files kbuild-integration's patches for ``version`` add."""
    return [after for before, after in _patch_targets(version) if before == '/dev/null']


def layout_files(version: str) -> list[str]:
    """The files that kbuild-integration/linux-VERSION/layout says a tree of
    that version has (``apply`` looks at them to recognize it)."""
    marks = (INTEGRATION / f'linux-{version}' / 'layout').read_text().splitlines()
    names = {m.split(':', 1)[0].split('=', 1)[0] for m in marks
             if m and not m.startswith(('#', '!'))}
    return sorted(names)


_TARBALLS: dict[str, Path] = {}


def tarball(version: str) -> Path:
    """Debian's linux-source-VERSION tarball, as scripts/get-linux-source.sh
    finds it (installed with the package, or, for a version the machine's
    Debian suites lack, such as 7.2, downloaded from the development suite
    once and kept)."""
    if version not in _TARBALLS:
        r = run(ROOT / 'scripts' / 'get-linux-source.sh', version, check=False)
        if r.returncode != 0:
            pytest.fail(f'no source of Linux {version}: scripts/get-linux-source.sh says '
                        f'{r.stderr.strip()[-500:]}')
        _TARBALLS[version] = Path(r.stdout.strip())
    return _TARBALLS[version]


def kernel_source(dest: Path, version: str = '6.1', files: Sequence[str] | None = None) -> Path:
    """Pristine Linux ``version`` source (only ``files`` if given) in
    ``dest``, from Debian's tarball (the files: from one extraction a run)."""
    if files is None:
        _extract(version, dest)
        return dest
    pristine = _quick_files(version)
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pristine / f, dest / f)
    return dest


def _extract(version: str, dest: Path, files: Sequence[str] = ()) -> None:
    archive = tarball(version)
    dest.mkdir(parents=True)
    run('tar', '-xf', archive, '-C', dest, '--strip-components=1',
        *[f'linux-source-{version}/{f}' for f in files])


_QUICK: dict[str, Path] = {}


def _quick_files(version: str) -> Path:
    """The files of ``version`` that the tests without a build read (what
    the patches and the layout name, Kbuild.include and Makefile.btf),
    extracted once per run (and removed when it ends): a member of the
    tarball costs a decompression of all of it."""
    if version not in _QUICK:
        names = {*patched_files(version), *layout_files(version), 'scripts/Kbuild.include'}
        if version != '6.1':
            names.add('scripts/Makefile.btf')
        scratch = tempfile.mkdtemp(prefix=f'objbtf-linux-{version}-')
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        dest = Path(scratch) / 'linux'
        _extract(version, dest, sorted(names))
        _QUICK[version] = dest
    return _QUICK[version]


def apply(tree: Path) -> subprocess.CompletedProcess:
    """kbuild-integration/apply on ``tree``, not checked."""
    need('patch')
    return run(INTEGRATION / 'apply', tree, check=False)


@functools.cache
def objbtf_command() -> str:
    """$OBJBTF, else the installed objbtf called directly (no pyenv shim),
    which must run this checkout's sources: the builds test the command,
    the other tests the checkout."""
    beside = Path(sys.executable).with_name('objbtf')
    path = os.environ.get('OBJBTF') or (str(beside) if beside.exists() else shutil.which('objbtf'))
    if path is None:
        pytest.fail('objbtf is not installed: run scripts/install.sh')
    version = run(path, '--version').stdout.strip()
    ours = source_digest('objbtf', 'linkdedup').hex()[:12]
    if not version.endswith(f'sources {ours}'):
        pytest.fail(f'{path} ({version}) does not run the sources of this checkout '
                    f'({ours}): run scripts/install.sh')
    return path


def quick_command() -> str:
    """What ``objbtf server command`` prints: the C client when it is built."""
    r = subprocess.run([objbtf_command(), 'server', 'command'], capture_output=True, text=True,
                       check=True)
    return r.stdout.strip()


def make(src: Path, build: Path, *args: str, fails: bool = False) -> str:
    """make OBJBTF=... ARGS (targets and variables) in the O= tree; fails on
    a BTF-related warning, and unless make succeeds (fails if ``fails``).
    Returns what make wrote to stderr."""
    r = subprocess.run(['make', '-C', str(src), f'O={build}', f'-j{os.cpu_count() or 2}',
                        f'OBJBTF={objbtf_command()}', *args],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert (r.returncode != 0) == fails, r.stderr[-3000:]
    warnings = [line for line in r.stderr.splitlines() if 'warning' in line.lower() and 'BTF' in line]
    assert warnings == []
    return r.stderr


def vmlinux_members(build: Path) -> list[Path]:
    """The objects of the build's vmlinux.a (a thin archive), in its order."""
    return [build / m for m in run('ar', 't', build / 'vmlinux.a').stdout.split()]


#: Per version: the temporary vmlinux link.vmlinux.sh makes BTF from (with
#: OBJBTF its .BTF.objects holds the objects' BTF), and the object holding
#: the BTF that the final link puts in vmlinux.
BTF_FILES = {'6.1': ('.tmp_vmlinux.btf', '.btf.vmlinux.bin.o'),
             '6.12': ('.tmp_vmlinux1', '.tmp_vmlinux1.btf.o'),
             '7.2': ('.tmp_vmlinux1', '.tmp_vmlinux1.btf.o')}


@dataclass
class KernelBuild:
    """A patched source tree and its O= build directory, with the make
    arguments every ``make`` in it takes (``LLVM=1``, ``ARCH=...``)."""
    version: str
    src: Path
    build: Path
    make_args: tuple[str, ...] = ()
    stderr: str = field(default='', repr=False)      # the first build's

    def make(self, *args: str, fails: bool = False) -> str:
        """``make`` in this tree with its own arguments, then ``args``."""
        return make(self.src, self.build, *self.make_args, *args, fails=fails)

    @property
    def tmp_vmlinux(self) -> Path:
        """The link objbtf made vmlinux's BTF from: on 6.1 with kallsyms,
        the first kallsyms link (docs/kbuild.md)."""
        if self.version == '6.1' and 'CONFIG_KALLSYMS=y' in self.config():
            return self.build / '.tmp_vmlinux.kallsyms1'
        return self.build / BTF_FILES[self.version][0]

    def config(self) -> str:
        return (self.build / '.config').read_text()

    @property
    def btf_script(self) -> Path:
        """The script that runs the vmlinux link's BTF step (and, on 7.2,
        the modules'): gen-btf.sh from 7.x on, link-vmlinux.sh before."""
        gen_btf = self.src / 'scripts/gen-btf.sh'
        return gen_btf if gen_btf.exists() else self.src / 'scripts/link-vmlinux.sh'

    @property
    def linked_vmlinux(self) -> Path:
        """The file whose saved command is link-vmlinux.sh's: 7.x links
        vmlinux.unstripped and copies it to vmlinux without relocations."""
        unstripped = self.build / 'vmlinux.unstripped'
        return unstripped if unstripped.exists() else self.build / 'vmlinux'

    @property
    def btf_object(self) -> Path:
        return self.build / BTF_FILES[self.version][1]

    def modules(self) -> list[Path]:
        """The .ko files, in modules.order's order."""
        order = (self.build / 'modules.order').read_text().split()
        return [self.build / Path(line).with_suffix('.ko') for line in order]


#: Free space, in GiB, that a copy of the source and a build of the reference
#: kernel with DWARF take (du: 1.5 and 0.6 to 0.8), with some to spare.
SOURCE_GIB, BUILD_GIB = 2.0, 1.5
_PATCHED_SOURCES: dict[str, Path] = {}


def need_space(where: Path, gib: float, what: str) -> None:
    """Fail, saying so, when the file system of ``where`` has less than
    ``gib`` GiB free: a full disk otherwise shows as an error of tar or
    make in whatever test comes next."""
    free = shutil.disk_usage(where).free / 2**30
    if free < gib:
        pytest.fail(f'{where}: {free:.1f} GiB free, {what} needs about {gib} GiB '
                    '(free some space, or give pytest --basetemp on a larger disk)')


def patched_source(parent: Path, version: str) -> Path:
    """A copy of Linux ``version`` with the integration applied, made once per
    run in ``parent``/linux-VERSION and shared by every build of that
    version: each builds in its own O= directory and Kbuild writes nothing
    in the source (a copy per build took 1.5 GiB each)."""
    if version not in _PATCHED_SOURCES:
        src = parent / f'linux-{version}'
        if not (src / 'Makefile').exists():          # (a kept source: patched already)
            need_space(parent, SOURCE_GIB, f'a copy of Linux {version}')
            kernel_source(src, version)
        result = apply(src)
        assert result.returncode == 0, result.stderr
        _PATCHED_SOURCES[version] = src
    return _PATCHED_SOURCES[version]


@contextmanager
def touched(path: Path) -> Iterator[None]:
    """``path`` made newer than anything built from it, then given its old
    times back: the source is shared, and the other builds of its version
    must not see the change."""
    before = path.stat()
    path.touch()
    try:
        yield
    finally:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def patched_build(top: Path, version: str, make_args: Sequence[str] = (),
                  targets: Sequence[str] = ('vmlinux', 'modules'),
                  fragments: Sequence[Path] = ()) -> KernelBuild:
    """Linux ``version`` with the integration applied, configured
    (``kbuild-integration/configure``, the reference config or
    ``fragments``) and built with ``make OBJBTF=... TARGETS`` in
    ``top``/build; ``make_args`` go to every make, configure's too.  The
    source is ``patched_source``'s, shared with the other builds of
    ``version``."""
    for tool in ('make', 'gcc', 'pahole', 'bpftool'):
        need(tool)
    src, build = patched_source(top.parent, version), top / 'build'
    need_space(top, BUILD_GIB, 'a kernel build')
    run(INTEGRATION / 'configure', src, build, *fragments, *make_args)
    tree = KernelBuild(version, src, build, tuple(make_args))
    tree.stderr = tree.make(*targets)
    (top / 'make.stderr').write_text(tree.stderr)
    return tree


def build_args(row: Build) -> tuple[str, ...]:
    """What every make of ``row``'s build takes: a DWARF-less one runs
    objbtf through the quickest client, as the DWARF-less bench does (and
    Kconfig reads OBJBTF too, so configure takes them all)."""
    if row.mode == 'gbtf':
        return row.make_args() + (f'OBJBTF={quick_command()}', 'OBJBTF_GBTF=1')
    return row.make_args()


def fragment_path(name: str) -> Path:
    """A matrix row's config fragment: the tests' own, or the integration's."""
    own = KCONFIG / name
    return own if own.exists() else INTEGRATION / 'configs' / name


def build_row(row: Build, top: Path) -> KernelBuild:
    """The build of kernel_matrix's ``row`` in ``top`` (deleted with
    ``remove_scratch(row.fixture)``), its .config checked for what its
    fragments are there for."""
    for tool in row.tools():
        need(tool)
    tree = patched_build(scratch(row.fixture, top), row.version, build_args(row),
                         targets=row.targets(),
                         fragments=[fragment_path(f) for f in row.fragments])
    config = tree.config()
    missing = [line for line in row.expect_config if line not in config.splitlines()]
    assert missing == [], f'{row.describe()}: Kconfig did not keep {missing}'
    return tree


def kept_build(row: Build, parent: Path) -> KernelBuild:
    """``row``'s build in ``parent``/FIXTURE, as a finished earlier run left
    it (its make.stderr written), or made there now and kept."""
    top = parent / row.fixture
    if (top / 'make.stderr').exists():
        return KernelBuild(row.version, parent / f'linux-{row.version}', top / 'build',
                           build_args(row), (top / 'make.stderr').read_text())
    top.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(top / 'build', ignore_errors=True)
    return build_row(row, top)


#: Build fixture -> the directories its tests leave once they are done.
_SCRATCH: dict[str, list[Path]] = {}


def scratch(build: str, path: Path) -> Path:
    """``path``, to be deleted after the last test of ``build``."""
    _SCRATCH.setdefault(build, []).append(path)
    return path


def remove_scratch(build: str) -> None:
    for path in _SCRATCH.pop(build, []):
        shutil.rmtree(path, ignore_errors=True)


def remove_patched_source(version: str) -> None:
    """Deletes the patched copy of ``version`` (a later build makes it again)."""
    src = _PATCHED_SOURCES.pop(version, None)
    if src is not None:
        shutil.rmtree(src, ignore_errors=True)

# --- reading what the build made ---------------------------------------------

def sections(path: Path) -> dict[str, tuple[bytes, int]]:
    """Section name -> (contents, flags), failing on a repeated name."""
    with open(path, 'rb') as f:
        elf = ELFFile(f)
        names = [s.name for s in elf.iter_sections()]
        assert len(names) == len(set(names)), f'{path}: repeated section names'
        return {s.name: (s.data(), s['sh_flags']) for s in elf.iter_sections()}


def blob_length(data: bytes) -> int:
    """Length of the BTF blob at the start of ``data``, from its header."""
    magic, _, _, hdr_len = struct.unpack_from('<HBBI', data)
    assert magic == 0xEB9F
    _, _, str_off, str_len = struct.unpack_from('<IIII', data, 8)
    return hdr_len + str_off + str_len



#: The modules of the reference config (7.2's networking options add more).
REFERENCE_MODULES = {'dummy.ko', 'veth.ko', 'tun.ko'}


def vdso_image(build: Path) -> Path:
    """The x86_64 vDSO image (7.2 keeps it in vdso/vdso64/)."""
    [vdso] = (build / 'arch/x86/entry/vdso').rglob('vdso64.so')
    return vdso


def assert_the_running_kernel_accepts(vmlinux: Path) -> None:
    """``objbtf check --kernel``: the running kernel loads vmlinux's BTF.
    BTF with a kind layout section (7.2's ``layout``), which kernels before
    7.x refuse, is loaded by its own kernel instead, booted (test_boot.py)."""
    from objbtf.btf.header import BtfHeader
    if BtfHeader.read(sections(vmlinux)['.BTF'][0]).layout_len:
        return
    kernel = objbtf('check', '--kernel', vmlinux, check=False)
    assert kernel.returncode == 0, kernel.stdout + kernel.stderr


def assert_valid_split_btf(vmlinux: Path, ko: Path) -> None:
    """The module's split BTF passes objbtf check and bpftool on vmlinux's."""
    assert objbtf('check', '--base', vmlinux, ko).returncode == 0
    run(need('bpftool'), 'btf', 'dump', '-B', vmlinux, 'file', ko)
