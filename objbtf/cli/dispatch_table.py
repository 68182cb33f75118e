"""The dispatch table: where a command line runs, decided by its first words.

Read by every path into objbtf: the console entry and the Python client
without site (``entry``), the resident server's workers (through
``options.parse_fast``), and the C client, which has these names compiled
in (``objbtf.resident.native_client.build``).  Imports nothing: the
quickest clients read it before anything else.
"""

#: Run by the build tree's resident server when there is one; else, and in
#: the server's workers, read without click (``options.parse_fast``) and run
#: by ``commands.dispatch``.  Kbuild runs them once per object or module.
SERVED = ('encode', 'cc', 'link')
#: ``objbtf server command [--start]``: answered without click
#: (``objbtf.resident.native_client.print_command``), since Kbuild asks it
#: once per make.
SERVER_COMMAND = ('server', 'command')
#: Every other command line (help, a mistake, the other commands) goes to
#: the click CLI, ``click_cli``, built from the same options table.
