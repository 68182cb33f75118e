"""Appending a benchmark's report to bench/RESULTS.md, the same way for every bench."""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / 'RESULTS.md'


def record(title: str, report: str, note: str = '', results: Path = RESULTS) -> None:
    """Append ``report`` under a dated ``title``, after the command line that
    made it (this process's own arguments) and an optional ``note``."""
    script = Path(sys.argv[0])
    command = shlex.join(['python3', f'bench/{script.name}', *sys.argv[1:]])
    with open(results, 'a') as f:
        f.write(f'\n## {title}, {time.strftime("%Y-%m-%d %H:%M")}\n\n`{command}`'
                f'{" " + note if note else ""}\n\n```\n{report}\n```\n')
