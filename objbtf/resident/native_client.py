"""objbtf-client: the resident server's client in C (client.c), built here.

Kbuild runs objbtf once per object; the Python client (client.py) spends
about 6 ms of CPU starting the interpreter before it connects, the C one
well under 1 ms.  It is built when objbtf is installed (setup.py, or
``python3 -m objbtf.resident.native_client`` in a checkout), for the interpreter that
builds it: that interpreter runs every command it cannot serve itself.
``objbtf server command`` prints it when ``program()`` finds it usable, else
the Python client's command line.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

#: ``program`` and ``print_command`` run once per make (``objbtf server
#: command``): this module imports only os and sys at the top, and what
#: ``build`` needs (subprocess, tempfile, pathlib: about 9 ms) when it runs.
HERE = os.path.dirname(os.path.realpath(__file__))
SOURCE = os.path.join(HERE, 'client.c')
#: client.c and the header of objbtf's own that it includes.
SOURCES = (SOURCE, os.path.join(os.path.dirname(HERE), 'blake2b.h'))
#: What client.c is compiled with (read, not imported: setup.py loads this
#: module outside its package): the wire protocol, and the commands the
#: server runs.
PROTOCOL_SOURCE = os.path.join(HERE, 'protocol.py')
DISPATCH_TABLE_SOURCE = os.path.join(os.path.dirname(HERE), 'cli', 'dispatch_table.py')
NAME = 'objbtf-client'


def _c_string(text: str) -> str:
    """``text`` as a C string literal (every byte but letters and digits in octal)."""
    return '"' + ''.join(chr(b) if chr(b).isalnum() else f'\\{b:03o}'
                         for b in text.encode(errors='surrogateescape')) + '"'


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _defines() -> list[str]:
    """client.c's -D options: the protocol's constants (``protocol``) and the
    served commands (``objbtf.cli.dispatch_table``), each defined once in Python."""
    import runpy
    protocol = runpy.run_path(PROTOCOL_SOURCE)
    served = runpy.run_path(DISPATCH_TABLE_SOURCE)['SERVED']
    numbers = ('PROTOCOL', 'MAX_MESSAGE', 'MAX_SOCKET_PATH', 'SOCKET_NAME')
    strings = ('REPLY_OK', 'REPLY_FALLBACK', 'REPLY_EXIT', 'REPLY_CONFINED', 'REQUEST_RUN',
               'REQUEST_TOO_BIG', 'VERBOSE', 'NOT_CONFINED_AS_SERVER', 'TOO_BIG')
    return ([f'-DOBJBTF_{name}={protocol[name]}' for name in numbers]
            + [f'-DOBJBTF_{name}={_c_string(_text(protocol[name]))}' for name in strings]
            + [f'-DOBJBTF_SERVED={",".join(map(_c_string, served))}'])


def compilers(cc: str | None = None) -> list[str]:
    """The compilers ``build`` tries, in order: ``cc`` when given, else
    ``$CC`` when set, else musl's ``musl-gcc`` (Debian's musl-tools) where
    installed, then the system's ``cc``.  musl first because its static
    start is the quickest: glibc's, even linked statically, probes the
    CPU's caches with ``cpuid`` at every start, which traps to the
    hypervisor in a virtual machine (about 0.6 ms of CPU a command there,
    against 0.03 ms for musl's: docs/resident-server.md, "Clients")."""
    import shutil
    if cc or os.environ.get('CC'):
        return [cc or os.environ['CC']]
    musl = shutil.which('musl-gcc')
    return [*([musl] if musl else []), shutil.which('cc') or 'gcc']


def build(dest: Path | None = None, cc: str | None = None) -> Path:
    """Compile client.c into ``dest``/objbtf-client (default: beside this
    module; written under another name, then renamed); its path.  Linked
    statically where a C library allows it, with the first of
    ``compilers(cc)`` that can: Kbuild runs the client once per object, and
    a dynamically linked program's start (the loader, relocations) is
    about a quarter of what the client costs with glibc (0.71 to 0.82 ms
    of CPU a command, against 0.51 to 0.65 linked statically:
    docs/resident-server.md, "Clients"); dynamically with the last where
    none can.  Raises OSError or CalledProcessError."""
    import subprocess
    import tempfile
    from pathlib import Path
    dest = Path(HERE) if dest is None else dest
    target = dest / NAME
    with tempfile.TemporaryDirectory(dir=dest, prefix='.objbtf-client-') as tmp:
        out = Path(tmp) / NAME
        flags = ['-O2', '-std=gnu11', '-Wall', '-o', str(out), str(SOURCE),
                 f'-DOBJBTF_PYTHON={_c_string(sys.executable)}',
                 f'-DOBJBTF_PYTHON_VERSION={_c_string(sys.version)}', *_defines()]
        tried = [[compiler, *flags, '-static'] for compiler in compilers(cc)]
        tried.append(tried[-1][:-1])
        for command in tried:
            try:
                subprocess.run(command, check=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
                break
            except subprocess.CalledProcessError:   # no static C library there
                if command is tried[-1]:
                    raise
        os.chmod(out, 0o755)
        os.replace(out, target)
    return target


def program() -> str | None:
    """The C client beside this module, if it is usable here: built from the
    client.c beside it (not older than it or its header; a wheel has
    neither), for this machine (the interpreter's ELF
    class, byte order and machine) and this interpreter (whose path and
    version it holds)."""
    path = os.path.join(HERE, NAME)
    try:
        if not os.access(path, os.X_OK) or any(
                os.path.exists(source) and os.stat(path).st_mtime_ns < os.stat(source).st_mtime_ns
                for source in SOURCES):
            return None
        with open(path, 'rb') as f:
            data = f.read()
        with open(sys.executable, 'rb') as f:
            interpreter = f.read(20)
    except OSError:
        return None
    # e_ident's class and data bytes, e_machine
    if (data[4:6], data[18:20]) != (interpreter[4:6], interpreter[18:20]):
        return None
    wanted = (sys.executable, sys.version)
    if all(b'\0' + s.encode(errors='surrogateescape') + b'\0' in data for s in wanted):
        return path
    return None


def print_command(start: bool) -> None:
    """``objbtf server command [--start]``: print the quickest command line
    that runs objbtf (this program, else the interpreter without site on
    ``objbtf/cli/entry_no_site.py``); with ``start``, first have this tree's server
    started in the background."""
    import shlex
    from .client import prestart
    from .protocol import ROOT
    if start:
        prestart()
    native = program()
    print(shlex.quote(native) if native is not None
          else shlex.join([sys.executable, '-S', f'{ROOT}/objbtf/cli/entry_no_site.py']))


if __name__ == '__main__':
    import subprocess
    try:
        print(build())
    except (OSError, subprocess.CalledProcessError) as err:
        output = getattr(err, 'output', b'') or b''
        sys.exit(f'objbtf: cannot build {NAME}: {err}\n{output.decode(errors="replace")}')
