"""The command lines Kbuild saves beside each file it makes (``.NAME.cmd``):
the one reader the tests and the benchmarks share, and the compiles made
again from them (the same object, or without DWARF, as the DWARF-less
build compiles)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

#: ``cmd_TARGET := LINE`` (``savedcmd_`` from 6.3 on), the file's first line.
_SAVED = re.compile(r'^(?:saved)?cmd_\S+ := (.*)$', re.M)


def saved_command(target: Path) -> str | None:
    """The command line Kbuild saved for ``target``, or None if it saved none."""
    cmd_file = target.parent / f'.{target.name}.cmd'
    if not cmd_file.exists():
        return None
    m = _SAVED.search(cmd_file.read_text())
    return m.group(1) if m else None


def first_command(target: Path) -> list[str]:
    """The first command of that line (the compiler's or the linker's, before
    the post-steps joined with ';'), split as the shell would."""
    line = saved_command(target)
    if line is None:
        raise FileNotFoundError(f'{target}: Kbuild saved no command line for it')
    return shlex.split(line.split(';', 1)[0])


def compile_command(build: Path, obj: Path, out: Path) -> list[str] | None:
    """The object's saved gcc command, writing to ``out`` instead."""
    try:
        args = first_command(obj)
    except FileNotFoundError:          # no saved command: not built by Kbuild
        return None
    if not args or not args[0].endswith('gcc') or '-c' not in args:
        return None
    rel = str(obj.relative_to(build))
    fixed = []
    for a in args:
        if a.startswith('-Wp,-MMD,'):
            a = f'-Wp,-MMD,{out}.d'
        fixed.append(str(out) if a == rel else a)
    return fixed


DWARF_FLAGS = ('-g',)


def without_debug(cmd: list[str]) -> list[str]:
    """The command without debug information: -g and -gdwarf-N out."""
    return [a for a in cmd if a not in DWARF_FLAGS and not a.startswith('-gdwarf')]


def without_dwarf(cmd: list[str]) -> list[str]:
    """The DWARF-less build's command: -g and -gdwarf-N out, -gbtf in."""
    return without_debug(cmd) + ['-gbtf']
