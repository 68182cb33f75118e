"""What the wheel of ``python -m build`` gives a user: objbtf's per-object hot path compiled
with mypyc (setup.py), the same bytes as pure Python, OBJBTF_PURE=1 to run
the sources instead, and never a compiled module shadowing an edited
source; with OBJBTF_MYPYC=0, pure Python."""
from __future__ import annotations

import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import C_FIXTURES, ROOT, compile_c, need, run

import objbtf
from objbtf.source_digest import source_digest

#: The sources encoded three ways; gcc and clang give different DWARF, and
#: gcc -gbtf its own BTF.
SOURCES = ('kinds.c', 'scopes.c', 'tags.c')


def _install(dest: Path, wheels: Path, **env: str) -> Path:
    """This checkout built into a wheel as scripts/install.sh builds it
    (``python -m build``, with ``env`` the only build switches), and
    unpacked into ``dest`` (a directory to put on PYTHONPATH)."""
    base = {k: v for k, v in os.environ.items() if k != 'OBJBTF_MYPYC'}
    run(sys.executable, '-m', 'build', '--wheel', '--outdir', wheels, ROOT, env={**base, **env})
    (wheel,) = wheels.glob('objbtf-*.whl')
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    return dest


@pytest.fixture(scope='module')
def compiled(tmp_path_factory) -> Path:
    """pip's default build: no switch."""
    return _install(tmp_path_factory.mktemp('site'), tmp_path_factory.mktemp('wheels'))


def python(site: Path, code: str, **env: str) -> str:
    """``code``'s output, run with the package installed in ``site`` (from
    there: ``python -c`` puts its directory first on sys.path)."""
    env = {**{k: v for k, v in os.environ.items() if k != 'OBJBTF_PURE'},
           'PYTHONPATH': str(site), **env}
    return run(sys.executable, '-c', code, env=env, cwd=site).stdout.strip()


WHICH = 'import objbtf, objbtf.dwarf.reader as r; print(objbtf.implementation(), r.__file__)'


def test_install_compiles_the_hot_path(compiled):
    assert python(compiled, WHICH).startswith(f'compiled (mypyc) {compiled}/objbtf/dwarf/reader.')
    assert python(compiled, WHICH).endswith('.so')
    for module in (*objbtf.COMPILED, *objbtf.C_EXTENSIONS):
        assert list(compiled.glob(f'{module.replace(".", "/")}.*.so')), module
    version = run(sys.executable, '-m', 'objbtf', '--version',
                  env={**os.environ, 'PYTHONPATH': str(compiled)}, cwd=compiled).stdout
    sources = source_digest('objbtf', 'linkdedup').hex()[:12]
    assert version.strip().endswith(f', compiled (mypyc), sources {sources}')


def test_pure_switch(compiled):
    out = python(compiled, WHICH, OBJBTF_PURE='1')
    assert out == f'pure Python (OBJBTF_PURE) {compiled}/objbtf/dwarf/reader.py'


def test_pure_switch_holds_for_the_link_modules_imported_first(compiled):
    """linkdedup's compiled modules follow objbtf's choice even when one of
    them is the first thing imported (linkdedup imports objbtf first)."""
    merge = 'import linkdedup.merge as m; print(m.__file__)'
    assert python(compiled, merge).startswith(f'{compiled}/linkdedup/merge.')
    assert python(compiled, merge).endswith('.so')
    assert python(compiled, merge, OBJBTF_PURE='1') == f'{compiled}/linkdedup/merge.py'


def test_compiled_and_pure_encode_the_same_bytes(compiled, tmp_path):
    """Every object encoded by the compiled modules, by the same install with
    OBJBTF_PURE=1 and by this checkout's sources: the same bytes, from
    DWARF and from GCC's BTF."""
    objects = [compile_c(cc, C_FIXTURES / src, tmp_path / f'{cc}-{src}.o')
               for cc in ('gcc', 'clang') for src in SOURCES]
    for src in SOURCES:             # the DWARF-less build's objects
        objects.append(tmp_path / f'gbtf-{src}.o')
        run(need('gcc'), '-O2', '-c', '-gbtf', '-o', objects[-1], C_FIXTURES / src)
    results = {}
    for way, site, env in (('compiled', compiled, {}), ('switched', compiled, {'OBJBTF_PURE': '1'}),
                           ('checkout', ROOT, {})):
        work = tmp_path / way
        work.mkdir()
        for obj in objects:
            shutil.copyfile(obj, work / obj.name)
        env = {**{k: v for k, v in os.environ.items() if k != 'OBJBTF_PURE'},
               'PYTHONPATH': str(site), **env}
        # Named alike in every directory: the .BTF.objbtf chunk records the path.
        run(sys.executable, '-m', 'objbtf', 'encode', '-q', *[o.name for o in objects],
            cwd=work, env=env)
        results[way] = [(work / o.name).read_bytes() for o in objects]
    assert results['compiled'] == results['switched'] == results['checkout']
    assert all(b'.BTF' in data for data in results['compiled'])


def test_edited_source_is_not_shadowed(compiled, tmp_path):
    """An edit newer than the compiled code (an editable install's checkout)
    runs the sources of every compiled module, and says so."""
    site = tmp_path / 'site'
    shutil.copytree(compiled, site)
    edited = site / 'objbtf' / 'dwarf' / 'loader.py'
    later = time.time() + 60
    os.utime(edited, (later, later))
    out = python(site, WHICH + '; import objbtf.btf.types as t; print(t.__file__)')
    assert out.splitlines() == [f'pure Python ({edited} is newer than the compiled modules) '
                                f'{site}/objbtf/dwarf/reader.py', f'{site}/objbtf/btf/types.py']


def test_pure_switch_is_part_of_the_server_identity(compiled):
    """A resident server never serves a client that asked for the other code."""
    digest = 'from objbtf.resident.protocol import code_digest; print(code_digest())'
    assert python(compiled, digest) != python(compiled, digest, OBJBTF_PURE='1')
    assert python(compiled, digest) == python(compiled, digest, OBJBTF_PURE='0')


def test_build_without_compiling(tmp_path):
    """With OBJBTF_MYPYC=0: a pure Python install that works the same."""
    site = _install(tmp_path / 'site', tmp_path / 'wheels', OBJBTF_MYPYC='0')
    assert not list(site.rglob('*.so'))
    assert python(site, WHICH) == f'pure Python (not compiled) {site}/objbtf/dwarf/reader.py'
