"""The ``objbtf`` console entry point, and the Python client's.

``encode``, ``cc`` and ``link`` (``dispatch_table.SERVED``) go to the build
tree's resident server (``objbtf.resident.client``), which runs them in a
warm process; without one (or with OBJBTF_RESIDENT=0) they run here.
Here, their plain forms are read from the
command-line table without click (``options.parse_fast``), since importing
click costs about 40 ms, and so is ``server command``, which Kbuild runs once
per make; anything else (help, a mistake, the other commands) goes to the
click CLI in ``click_cli``, built from the same table.
"""
import sys

from ..resident.client import enabled, serve
from .dispatch_table import SERVED, SERVER_COMMAND


def main() -> None:
    """Through the server, else in this process: with site set up as usual
    when Python started without it (``entry_no_site.py``)."""
    argv = sys.argv[1:]
    if argv and argv[0] in SERVED and enabled():
        status = serve(argv)
        if status is not None:
            sys.exit(status)
    if sys.flags.no_site:
        sys.argv[0] = 'objbtf'
        import site
        site.main()
    sys.exit(in_process(argv))


def in_process(argv: list[str]) -> int:
    """Run the command line in this process; its exit status."""
    if tuple(argv[:2]) == SERVER_COMMAND and set(argv[2:]) <= {'--start'}:
        # Kbuild asks this once per make, on a rebuild's critical path.
        from ..resident.native_client import print_command
        print_command(start='--start' in argv)
        return 0
    from .options import parse_fast
    parsed = parse_fast(argv)
    if parsed is None:
        from .click_cli import main as click_main
        return click_main(argv)         # never returns: click's standalone mode exits
    from .commands import dispatch
    return dispatch(parsed)
