"""The newest pahole, the kernel's own BTF encoder at its newest, as the
tests' reference for which FUNCs a link keeps and with what prototypes.

It is built from the vendored source (vendor/README.md) once a run, by the
``newest_pahole`` session fixture (conftest.py), with
scripts/build-pahole.sh.  Debian 12's pahole (1.24) stays the oracle for
everything else, as it is what the supported kernels' builders run.
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from conftest import FIXTURES, ROOT, run
from objbtf.btf_file import load_btf_file
from objbtf.inspect.diff import function_decls

TARBALL = ROOT / 'vendor' / 'dwarves-1436dafff5c2.tar.xz'
#: The small objects of tests/fixtures/functions, in link order (anchor.c
#: first: see its comment), each a case of the function rules.
CLONES = ('anchor', 'clones_a', 'clones_b')
CLONES_CFLAGS = ('-g', '-O2', '-c')
#: The flags each 6.x version's scripts/pahole-flags.sh or Makefile.btf gives
#: the newest pahole, where the tests compare with it (7.x trees say theirs:
#: stock_btf.pahole_flags): 6.1's, with --btf_features=default as
#: Makefile.btf passes from pahole 1.26 on.
NEWEST_PAHOLE_FLAGS = {'6.1': ('-J', '--btf_features=default', '--btf_gen_floats', '-j',
                               '--lang_exclude=rust', '--skip_encoding_btf_inconsistent_proto',
                               '--btf_gen_optimized')}


def built(parent: Path) -> Path:
    """The newest pahole's binary, installed in ``parent`` (built there by
    scripts/build-pahole.sh unless an earlier run left it)."""
    prefix = parent / TARBALL.name.removesuffix('.tar.xz')
    pahole = prefix / 'bin' / 'pahole'
    if not pahole.exists():
        run(ROOT / 'scripts' / 'build-pahole.sh', TARBALL, prefix)
    return pahole


def funcs(pahole: Path, target: Path, flags: tuple[str, ...] = ('-J', '--btf_features=default')
          ) -> dict[str, list[str]]:
    """FUNC name -> its prototypes as ``objbtf diff`` prints them, in the BTF
    ``pahole`` with ``flags`` encodes from ``target``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / 'out.btf'
        subprocess.run([str(pahole), *flags, '--btf_encode_detached', str(out), str(target)],
                       check=True, capture_output=True, cwd=target.parent)
        return function_decls(load_btf_file(str(out)))


def build_clones(out: Path, encode=None) -> Path:
    """tests/fixtures/functions compiled with gcc into ``out``, each object
    passed to ``encode(path)`` if given, and linked into one executable."""
    objs = []
    for name in CLONES:
        obj = out / f'{name}.o'
        run('gcc', *CLONES_CFLAGS, '-o', obj, FIXTURES / 'functions' / f'{name}.c')
        if encode is not None:
            encode(obj)
        objs.append(obj)
    linked = out / 'clones'
    # A final link, as vmlinux's: pahole tells definitions apart by their
    # addresses, which an ld -r object's DWARF does not have yet.
    run('ld', '-e', '0', '--unresolved-symbols=ignore-all', '-o', linked, *objs)
    return linked
