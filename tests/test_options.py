"""The command-line table: click (built from it) and the click-free reader
(``options.parse_fast``) read every command line alike, and the fast path
leaves to click what it does not read exactly as click would."""
from __future__ import annotations

import subprocess
import sys

import click
import pytest

from conftest import ROOT
from objbtf.cli import click_cli
from objbtf.cli.dispatch_table import SERVED
from objbtf.cli.options import COMMANDS, parse_fast


def click_values(argv: list[str]) -> dict | None:
    """The values click gives the command's function, or None on a usage error."""
    command = click_cli.main.commands[argv[0]]
    try:
        ctx = command.make_context(argv[0], list(argv[1:]))
    except click.exceptions.Exit:
        return None
    except click.UsageError:
        return None
    values = dict(ctx.params)
    for key, value in values.items():
        if isinstance(value, tuple):
            values[key] = list(value)
    return values


def comparable(values: dict) -> dict:
    return {k: v.names() if hasattr(v, 'names') else v for k, v in values.items()}


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ('a.o', 'b.o', 'mod.ko', 'list'):
        (tmp_path / name).write_bytes(b'')
    (tmp_path / 'dir').mkdir()


READ_BY_BOTH = [
    ['encode', 'a.o'],
    ['encode', '-q', 'a.o', 'b.o'],
    ['encode', 'a.o', '--quiet', 'b.o'],
    ['encode', '--btf-features', 'default,global_var', 'a.o'],
    ['encode', '--btf-features=-float', '-q', 'a.o'],
    ['encode', '--', '-q.o'],
    ['encode', 'dir'],                          # the encoder refuses it, not click
    ['cc', '--', 'gcc', '-c', '-o', 'x.o', 'x.c'],
    ['cc', 'gcc', '-q', '-o', 'x.o', 'x.c'],
    ['cc', '--btf-features', 'default', '--', 'sh', '-c', 'exit 3'],
    ['link', 'mod.ko'],
    ['link', '--base', 'vmlinux', '--objects', 'list', '-q', 'mod.ko'],
    ['link', '-B', 'vmlinux', '--objects=list', '--allow-missing', 'mod.ko', '-j', '3'],
    ['link', '-o', 'out.o', '--cache', 'c', '--input-section', '.BTF.objects', 'mod.ko'],
    ['link', '--split-vars', 'v.btf', '--jobs', '1', 'mod.ko', '--btf-features', 'all'],
    ['link', 'missing.ko'],                     # an input error of the link, not click's
]

LEFT_TO_CLICK = [
    ['encode'],
    ['encode', '--help'],
    ['encode', '-h', 'a.o'],
    ['encode', '--bogus', 'a.o'],
    ['encode', '--quiet=yes', 'a.o'],
    ['encode', '--btf-features', 'nonsense', 'a.o'],
    ['encode', '--btf-features'],
    ['cc'],
    ['link'],
    ['link', 'a.o', 'b.o'],
    ['link', '--allow-missing', 'mod.ko'],
    ['link', '-j', '0', 'mod.ko'],
    ['link', '-j', 'x', 'mod.ko'],
    ['link', '-j4', 'mod.ko'],                  # click takes it; the fast reader leaves it
    ['link', '-o', 'dir', 'mod.ko'],
    ['dump', 'a.o'],
    ['server', 'status'],
]


@pytest.mark.parametrize('argv', READ_BY_BOTH, ids=' '.join)
def test_fast_reader_reads_as_click_does(files, argv):
    fast = parse_fast(argv)
    assert fast is not None and fast.command == argv[0]
    assert comparable(fast.values) == comparable(click_values(argv))


@pytest.mark.parametrize('argv', LEFT_TO_CLICK, ids=' '.join)
def test_fast_reader_leaves_the_rest_to_click(files, argv):
    assert parse_fast(argv) is None


def test_the_table_declares_every_option_click_has():
    """click's commands carry exactly the table's options and arguments."""
    for name, command in COMMANDS.items():
        params = {p.name for p in click_cli.main.commands[name].params}
        assert params == {o.dest for o in command.options} | {command.argument.dest}, name
    assert set(SERVED) <= set(COMMANDS)


def test_fast_path_imports_no_click(tmp_path):
    """An encode in process, by the console entry, never imports click."""
    code = ('import sys; sys.argv = ["objbtf", "encode", "-q", "missing.o"]\n'
            'from objbtf.cli.entry import main\n'
            'try:\n    main()\nexcept SystemExit:\n    pass\n'
            'print("click" in sys.modules)')
    r = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True,
                       env={'PYTHONPATH': str(ROOT), 'OBJBTF_RESIDENT': '0', 'PATH': '/usr/bin:/bin'})
    assert r.stdout == 'False\n', r.stderr


@pytest.mark.parametrize('argv', [['server', 'command'], ['server', 'command', '--start']])
def test_server_command_imports_no_click_and_prints_what_click_does(tmp_path, argv):
    """Kbuild asks ``objbtf server command`` once per make: its entry prints
    what the click command prints, without importing click."""
    env = {'PYTHONPATH': str(ROOT), 'OBJBTF_RESIDENT': '0', 'PATH': '/usr/bin:/bin'}
    code = (f'import sys; sys.argv = ["objbtf", *{argv!r}]\n'
            'from objbtf.cli.entry import main\n'
            'try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n'
            'print("click" in sys.modules)')
    r = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True,
                       env=env)
    printed, imported = r.stdout.splitlines()
    assert imported == 'False', r.stderr
    by_click = subprocess.run([sys.executable, '-c', 'from objbtf.cli.click_cli import main; main()',
                               *argv], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert by_click.returncode == 0 and printed == by_click.stdout.strip() != ''
