"""The command lines Kbuild saves beside each file it makes (``.NAME.cmd``):
the one reader the tests and the benchmarks share."""
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
