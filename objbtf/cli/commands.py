"""What ``encode``, ``cc`` and ``link`` do, apart from parsing: shared by the
click CLI and by the click-free paths (``entry``, and the resident server's
children), so that a command does the same whichever path read it."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ..errors import ObjbtfError
from ..features import Features
from .options import Parsed

if TYPE_CHECKING:       # imported when a link runs: dataclasses costs 5 ms an encode
    from linkdedup.settings import LinkSettings


class Failure(ObjbtfError):
    """A command failed; str() is the one-line message (click prints it as
    "Error: ...", and so does ``dispatch``)."""


def dispatch(parsed: Parsed) -> int:
    """Run a command line ``options.parse_fast`` read; its exit status."""
    v = parsed.values
    if parsed.command == 'encode':
        return run_encode(v['objects'], v['features'], v['quiet'], v['drop_dwarf'])
    if parsed.command == 'cc':
        return run_cc(v['command'], v['features'], v['drop_dwarf'])
    from linkdedup.settings import LinkSettings
    try:
        lines = run_link(LinkSettings(**v))
    except Failure as err:
        print(f'Error: {err}', file=sys.stderr)
        return 1
    for line in lines:
        print(line, file=sys.stderr)
    return 0


def _say(message: str) -> None:
    print(f'objbtf: {message}', file=sys.stderr)


#: OBJBTF_DROP_DWARF=1 in the environment is --drop-dwarf: make puts a
#: variable of its command line there, so ``make OBJBTF_DROP_DWARF=1``
#: reaches every encode without a change to Kbuild.
DROP_DWARF_VARIABLE = 'OBJBTF_DROP_DWARF'


def drop_dwarf_asked(flag: bool) -> bool:
    """--drop-dwarf, or OBJBTF_DROP_DWARF set to anything but 0 or nothing."""
    return flag or os.environ.get(DROP_DWARF_VARIABLE, '0') not in ('', '0')


def run_encode(objects: list[str], features: Features, quiet: bool,
               drop_dwarf: bool = False) -> int:
    """Encode each object in place, through the encode cache if
    OBJBTF_CACHE_DIR names one, dropping its DWARF if asked
    (``drop_dwarf_asked``); 1 if any failed (or the cache's size is not a
    size), else 0."""
    from ..btf.types import gc_paused
    from ..encode.cache import CacheConfigError, EncodeCache
    from ..encode.object_file import EncodeFailure, encode_path
    try:
        cache = EncodeCache.from_environment()
    except CacheConfigError as err:
        _say(str(err))
        return 1
    failed = False
    drop_dwarf = drop_dwarf_asked(drop_dwarf)
    # The collector stays paused until each object's types are freed (by
    # reference counting, as they form no cycles): resumed while they were
    # alive, it would walk them all: about 0.8 ms per kernel object.
    with gc_paused():
        for path in objects:
            try:
                typeless = encode_path(path, features, cache, drop_dwarf) is None
            except EncodeFailure as err:
                _say(str(err))
                failed = True
                continue
            if typeless and not quiet:
                _say(f'{path}: no types to encode (no DWARF or compiler BTF, or none that BTF '
                     'keeps): no .BTF, only a .BTF.objbtf chunk naming it')
    if cache is not None and cache.problem is not None:
        _say(f'{cache.problem}: encoded without keeping it')
    return 1 if failed else 0


def run_cc(command: list[str], features: Features, drop_dwarf: bool = False) -> int:
    """Run the compiler, then encode its -o object; the compiler's status."""
    import subprocess
    output = output_of(command)
    try:
        status = subprocess.call(command)
    except OSError as err:
        _say(f'{command[0]}: {err.strerror}')
        return 127
    except BaseException:       # interrupted: the killed compiler's output is unfinished
        _remove(output)
        raise
    if status != 0:
        _remove(output)
        return status
    if output is None or not output.endswith('.o'):
        return 0
    return run_encode([output], features, True, drop_dwarf)


def _remove(output: str | None) -> None:
    if output and os.path.exists(output):
        os.unlink(output)


def output_of(command: list[str]) -> str | None:
    """The file after -o (or -oFILE) in a compiler command line."""
    for i, arg in enumerate(command):
        if arg == '-o' and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith('-o') and len(arg) > 2:
            return arg[2:]
    return None


def run_link(settings: LinkSettings) -> list[str]:
    """Link; the summary's lines (none if ``settings.quiet``), then what a
    DWARF-less vmlinux's BTF lacks, even if quiet.  Raises Failure."""
    from linkdedup.objects import ObjectsError
    from linkdedup.pipeline import LinkError, link
    from linkdedup.workers import WorkerError
    from ..errors import ObjbtfError
    from ..regular_files import error_text
    try:
        summary = link(settings)
    except (LinkError, ObjectsError, WorkerError) as err:
        raise Failure(str(err)) from None
    except (ObjbtfError, OSError) as err:
        raise Failure(f'{getattr(err, "filename", None) or settings.file}: '
                      f'{error_text(err)}') from None
    return ([] if settings.quiet else summary.lines()) + summary.dwarfless_note()
