"""``python3 -S .../objbtf/cli/entry_no_site.py ARGS``: objbtf without site, through the
resident server (``objbtf server command`` prints this command line).

A script Python compiles on every start, so it only puts the package's
parent first on sys.path and hands over to ``entry`` (compiled once, cached).
"""
import sys

if __name__ == '__main__':
    sys.path[0] = sys.path[0].rsplit('/', 2)[0]
    from objbtf.cli.entry import main
    main()
