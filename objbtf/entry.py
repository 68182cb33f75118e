"""The ``objbtf`` console entry point.

``encode`` and ``cc`` run once per object of a kernel build, 800 to 8,000
times, and importing click costs about 40 ms each time.  Their plain forms
are parsed here without click; anything else (help, a mistake, the other
commands) goes to the click CLI in ``objbtf.cli``, which defines the same
options and gives the usage messages.
"""
from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    parsed = _parse_per_object(argv)
    if parsed is None:
        from .cli import main as click_main
        click_main()
        return
    from .commands import run_cc, run_encode
    command, features, quiet, rest = parsed
    if command == 'encode':
        sys.exit(run_encode(rest, features, quiet))
    sys.exit(run_cc(rest, features))


def _parse_per_object(argv: list[str]):
    """(command, Features, quiet, files or compiler command), or None to let
    click handle the command line."""
    from .features import Features
    if not argv or argv[0] not in ('encode', 'cc'):
        return None
    command, args = argv[0], argv[1:]
    spec = None
    quiet = False
    while args and args[0].startswith('-') and args[0] != '--':
        opt = args.pop(0)
        if opt in ('-q', '--quiet') and command == 'encode':
            quiet = True
        elif opt == '--btf-features' and args:
            spec = args.pop(0)
        elif opt.startswith('--btf-features='):
            spec = opt.split('=', 1)[1]
        else:
            return None
    if args and args[0] == '--':
        args = args[1:]
    if not args or (command == 'encode' and any(a.startswith('-') for a in args)):
        return None
    try:
        features = Features.parse(spec)
    except ValueError:
        return None
    return command, features, quiet, args
