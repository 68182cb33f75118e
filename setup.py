"""Compiles objbtf's per-object hot path with mypyc, when it can.

Everything else is in pyproject.toml.  At build time the modules
``objbtf.COMPILED`` names become C extensions: about 1.5x less CPU per
encoded object (bench/RESULTS.md).  With OBJBTF_MYPYC=0, without mypyc, or
when mypyc or the C compiler fails, the installation is pure Python and
works the same (README: "Compiled modules").
"""
import os
import re
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
COMPILED = re.search(r'^COMPILED = \(([^)]*)\)', (HERE / 'objbtf' / '__init__.py').read_text(),
                     re.M).group(1)
MODULES = [f'objbtf/{m.replace(".", "/")}.py' for m in re.findall(r"'([\w.]+)'", COMPILED)]


def _warn(message: str) -> None:
    print(f'objbtf: {message}; installing pure Python', file=sys.stderr)


class BuildExt(build_ext):
    """All of the compiled modules or none: a module whose extension failed
    while another's built would call into a missing library."""

    def run(self) -> None:
        for ext in self.extensions:
            ext.optional = True
        super().run()
        outputs = [Path(self.get_ext_fullpath(ext.name)) for ext in self.extensions]
        if not all(p.exists() for p in outputs):
            _warn('the C compiler failed on the mypyc modules')
            for p in outputs:
                p.unlink(missing_ok=True)


def ext_modules() -> list:
    if os.environ.get('OBJBTF_MYPYC', '1') == '0':
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn('mypyc is not available')
        return []
    # mypy checks the compiled modules strictly, the others only for their types.
    config = Path(tempfile.mkdtemp()) / 'mypy.ini'
    config.write_text('[mypy]\n[mypy-objbtf.*,linkdedup.*]\nignore_errors = True\n'
                      f'[mypy-{",".join(m[:-3].replace("/", ".") for m in MODULES)}]\n'
                      'ignore_errors = False\n')
    try:
        return mypycify(['--config-file', str(config), *MODULES], opt_level='3',
                        group_name='objbtf._native')
    except (Exception, SystemExit) as err:      # mypyc exits on type errors
        _warn(f'mypyc failed ({err})')
        return []


setup(ext_modules=ext_modules(), cmdclass={'build_ext': BuildExt})
