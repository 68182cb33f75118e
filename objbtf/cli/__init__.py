"""The command line: its table of options (``options``), the dispatch of a
command line (``dispatch_table``, ``entry``), the click CLI (``click_cli``)
and what ``encode``, ``cc`` and ``link`` do once parsed (``commands``)."""
