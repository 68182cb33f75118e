"""What ``encode`` and ``cc`` do, apart from parsing: shared by the click CLI
and by the click-free entry point (see ``entry``)."""
from __future__ import annotations

import os
import sys

from .features import Features


def _say(message: str) -> None:
    print(f'objbtf: {message}', file=sys.stderr)


def run_encode(objects: list[str], features: Features, quiet: bool) -> int:
    """Encode each object in place; 1 if any failed, else 0."""
    from .encode_file import EncodeFailure, encode_path
    failed = False
    for path in objects:
        try:
            result = encode_path(path, features)
        except EncodeFailure as err:
            _say(str(err))
            failed = True
            continue
        if result is None and not quiet:
            _say(f'{path}: no DWARF types: no .BTF, only a .BTF.objbtf chunk naming it')
    return 1 if failed else 0


def run_cc(command: list[str], features: Features) -> int:
    """Run the compiler, then encode its -o object; the compiler's status."""
    import subprocess
    output = output_of(command)
    try:
        status = subprocess.call(command)
    except OSError as err:
        _say(f'{command[0]}: {err.strerror}')
        return 127
    if status != 0:
        if output and os.path.exists(output):
            os.unlink(output)
        return status
    if output is None or not output.endswith('.o'):
        return 0
    return run_encode([output], features, quiet=True)


def output_of(command: list[str]) -> str | None:
    """The file after -o (or -oFILE) in a compiler command line."""
    for i, arg in enumerate(command):
        if arg == '-o' and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith('-o') and len(arg) > 2:
            return arg[2:]
    return None
