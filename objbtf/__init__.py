"""objbtf: per-object BTF for Linux kernel builds.

The per-object hot path (``COMPILED``) may be compiled with mypyc when
objbtf is installed (setup.py; docs/contributing.md, "Compiled modules").  The compiled
modules run unless OBJBTF_PURE=1 is set, or one of their sources is newer
than the compiled code (a checkout edited under an editable install): then
those modules are imported from their Python sources, all of them, since
compiled modules call each other directly.  ``implementation()`` says which.
Only ``posix`` and ``sys`` here: the Python client imports this package.
"""
import posix
import sys

#: The modules setup.py compiles: the per-object path's, and the module
#: link's own passes (merge, and the dedup through the base's index).
COMPILED = ('objbtf.btf.dedup', 'objbtf.btf.function_rules', 'objbtf.btf.hashing',
            'objbtf.btf.reader', 'objbtf.btf.strings', 'objbtf.btf.type_rules',
            'objbtf.btf.types', 'objbtf.btf.validate', 'objbtf.btf.writer',
            'objbtf.compiler_btf.loader', 'objbtf.dwarf.constants', 'objbtf.dwarf.loader',
            'objbtf.dwarf.locations', 'objbtf.dwarf.reader', 'objbtf.elf.reader',
            'objbtf.elf.relocs', 'objbtf.encode.encoder',
            'linkdedup.base_index', 'linkdedup.merge', 'linkdedup.premap')
#: The C extensions built with them (setup.py), each from its ``.c``, and
#: used only when they are: the blob's writer, hashes and kernel-rule
#: check, dedup.py's passes, compiler_btf's loader, reader.py's DWARF
#: decoder, loader.py's types, the relocations' reading and applying, and
#: the link's merge by hash, in C.
C_EXTENSIONS = ('objbtf.btf._blob', 'objbtf.btf._dedup', 'objbtf.compiler_btf._amend',
                'objbtf.dwarf._dies', 'objbtf.dwarf._loader', 'objbtf.elf._relocs',
                'linkdedup._merge')
#: The headers they include, from this package.
C_HEADERS = ('blake2b.h', 'btf/_btf.h', 'dwarf/_arena.h')
#: mypyc's shared library of those modules, in this package.
NATIVE_LIB = '_native__mypyc'
#: A source this much newer than the compiled library is an edit, not the
#: install writing its files in some order.
EDIT_SLACK_NS = 2_000_000_000

_HERE = __file__.rpartition('/')[0] or '.'
#: The directory holding the objbtf and linkdedup packages.
_ROOT = _HERE.rpartition('/')[0] or '.'


def native_lib() -> str | None:
    """The path of the compiled library, if this installation has one."""
    for name in posix.listdir(_HERE):
        if name.startswith(NATIVE_LIB + '.') and name.endswith('.so'):
            return f'{_HERE}/{name}'
    return None


def _choose() -> str:
    lib = native_lib()
    if lib is None:
        return 'pure Python (not compiled)'
    if posix.environ.get(b'OBJBTF_PURE', b'0') != b'0':
        return 'pure Python (OBJBTF_PURE)'
    built = posix.stat(lib).st_mtime_ns
    sources = [f'{_ROOT}/{m.replace(".", "/")}.py' for m in COMPILED] \
        + [f'{_ROOT}/{m.replace(".", "/")}.c' for m in C_EXTENSIONS] + [f'{_HERE}/{h}' for h in C_HEADERS]
    for source in sources:
        try:
            if posix.stat(source).st_mtime_ns > built + EDIT_SLACK_NS:
                return f'pure Python ({source} is newer than the compiled modules)'
        except OSError:
            return 'compiled (mypyc)'       # installed without its sources
    return 'compiled (mypyc)'


_IMPLEMENTATION = _choose()


def implementation() -> str:
    """'compiled (mypyc)', or 'pure Python (why)'."""
    return _IMPLEMENTATION


def c_extension(name: str):
    """The C extension ``name`` (of ``C_EXTENSIONS``) when the compiled
    build runs and has it, else None: the pure-Python build runs the
    Python code each of them repeats."""
    if not _IMPLEMENTATION.startswith('compiled'):
        return None
    from importlib import import_module
    try:
        return import_module(name)
    except ImportError:
        return None


class _SourcesOnly:
    """Finds the compiled modules' Python sources, never their extensions."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name not in COMPILED or not path:
            return None
        from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader
        for entry in path:
            spec = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(name)
            if spec is not None:
                return spec
        return None


if _IMPLEMENTATION.startswith('pure') and native_lib() is not None:
    sys.meta_path.insert(0, _SourcesOnly)
