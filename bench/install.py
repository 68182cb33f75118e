"""objbtf installed from a checkout into a virtual environment, as a user installs it."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def installed_objbtf(tree: Path = HERE.parent, venv: Path = HERE / '.venv') -> str:
    """The ``objbtf`` script of ``tree`` installed (not editable) into ``venv``,
    with the C client the README's set-up builds (``python3 -m
    objbtf.resident.native_client``: pip's isolated build cannot).

    Not the development install: an editable install's import hook, and
    wrappers such as pyenv's shims, add start-up time a user does not pay;
    and a copy cannot change while a benchmark runs.
    """
    if not (venv / 'bin' / 'pip').exists():
        subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    subprocess.run([str(venv / 'bin' / 'pip'), 'install', '-q', '--force-reinstall', '--no-deps',
                    str(tree)], check=True, env=clean_env())
    subprocess.run([str(venv / 'bin' / 'pip'), 'install', '-q', str(tree)], check=True,
                   env=clean_env())
    # python3: the interpreter the console script names, which the client
    # must name too (native_client.program)
    subprocess.run([str(venv / 'bin' / 'python3'), '-m', 'objbtf.resident.native_client'],
                   check=True, env=clean_env(), cwd='/', stdout=subprocess.DEVNULL)
    return str(venv / 'bin' / 'objbtf')


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for the tools a benchmark measures: without this
    session's PYTHONPATH (which would run a checkout's code instead of the
    installed one) and PYTHONDONTWRITEBYTECODE (an installed tool keeps its
    .pyc files), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONDONTWRITEBYTECODE')}
    env.update(extra)
    return env


def quick_client(objbtf: str, env: dict[str, str]) -> list[str]:
    """What ``objbtf server command`` prints (the C client when it is built,
    else python -S on the bare client), as a command line's words."""
    return shlex.split(subprocess.run([objbtf, 'server', 'command'], env=env, check=True,
                                      capture_output=True, text=True).stdout)
