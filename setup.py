"""Compiles objbtf's per-object hot path with mypyc, when it can, and the
resident server's client in C.

Everything else is in pyproject.toml.  At build time the modules
``objbtf.COMPILED`` names become C extensions: about 1.5x less CPU per
encoded object (bench/RESULTS.md); with them, the C extensions
``objbtf.C_EXTENSIONS`` names are built from their ``.c`` files.  With
OBJBTF_MYPYC=0, without mypyc, or when mypyc or the C compiler fails, the
installation is pure Python and works the same (docs/contributing.md,
"Compiled modules").  objbtf/resident/objbtf-client is built from objbtf/resident/client.c
(objbtf/resident/native_client.py); without a C compiler objbtf uses its Python
client.
"""
import os
import re
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
INIT = (HERE / 'objbtf' / '__init__.py').read_text()


def _names(constant: str) -> list[str]:
    """The module names in the tuple ``constant`` of objbtf/__init__.py."""
    return re.findall(r"'([\w./]+)'", re.search(rf'^{constant} = \(([^)]*)\)', INIT, re.M).group(1))


MODULES = [f'{m.replace(".", "/")}.py' for m in _names('COMPILED')]
C_EXTENSIONS = _names('C_EXTENSIONS')
C_HEADERS = _names('C_HEADERS')


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


class BuildPy(build_py):
    """Also builds objbtf-client: beside the sources for an editable
    install, else with the package's other files; not in a virtual
    environment made for the build (``python -m build``): the client holds
    the path of its interpreter, which would be gone (the installed objbtf
    then uses its Python client, and ``python3 -m
    objbtf.resident.native_client`` builds the C one, as scripts/install.sh
    does)."""

    def run(self) -> None:
        super().run()
        editable = getattr(self, 'editable_mode', False)
        if not editable and sys.prefix != sys.base_prefix:
            print('objbtf: objbtf-client is not built for the interpreter of an isolated '
                  'build; python3 -m objbtf.resident.native_client builds it', file=sys.stderr)
            return
        sys.path.insert(0, str(HERE / 'objbtf' / 'resident'))
        import native_client
        dest = HERE / 'objbtf' / 'resident' if editable \
            else Path(self.build_lib) / 'objbtf' / 'resident'
        dest.mkdir(parents=True, exist_ok=True)
        try:
            native_client.build(dest)
        except Exception as err:        # no C compiler: the Python client serves
            print(f'objbtf: cannot build objbtf-client ({err}); '
                  'objbtf server command will print the Python client', file=sys.stderr)


def ext_modules() -> list:
    if os.environ.get('OBJBTF_MYPYC', '1') == '0':
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn('mypyc is not available')
        return []
    # mypy checks the compiled modules strictly, the others only for their types.
    # mypycify runs mypy before it returns: the configuration can go then.
    with tempfile.TemporaryDirectory(prefix='objbtf-mypy-') as tmp:
        config = Path(tmp) / 'mypy.ini'
        config.write_text('[mypy]\n[mypy-objbtf.*,linkdedup.*]\nignore_errors = True\n'
                          f'[mypy-{",".join(m[:-3].replace("/", ".") for m in MODULES)}]\n'
                          'ignore_errors = False\n')
        try:
            compiled = mypycify(['--config-file', str(config), *MODULES], opt_level='3',
                                group_name='objbtf._native')
        except (Exception, SystemExit) as err:      # mypyc exits on type errors
            _warn(f'mypyc failed ({err})')
            return []
    return compiled + [Extension(name, [f'{name.replace(".", "/")}.c'], extra_compile_args=['-O2'],
                                 depends=[f'objbtf/{h}' for h in C_HEADERS])
                       for name in C_EXTENSIONS]


setup(ext_modules=ext_modules(), cmdclass={'build_ext': BuildExt, 'build_py': BuildPy})
