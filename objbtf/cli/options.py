"""The command-line table: every option and argument of every subcommand, once.

``click_cli`` builds its click commands from it, with the help texts and usage
messages; ``parse_fast`` reads the plain forms of the commands a build runs
many times (``encode``, ``cc``, ``link``) from the same table without
importing click, which costs about 40 ms.  Anything the fast reader does not
take exactly as click would (help, a mistake, an unusual spelling) makes it
return None, and click reads the command line instead.

Kept free of heavy imports: the resident server's children and the
in-process fallback both parse with it.
"""
from __future__ import annotations

import os
from ..features import DEFAULT, OPTIONAL, Features
from .dispatch_table import SERVED


class Option:
    """One option.  ``kind``: flag, text, path, jobs (an int >= 1) or features;
    ``any_path``: a path that may also name a directory (the command itself
    says what is wrong with it, status 1, not click, status 2); ``requires``:
    the dest of an option this one needs.  (Plain classes: importing
    dataclasses costs 5 ms.)"""
    __slots__ = ('flags', 'dest', 'kind', 'help', 'metavar', 'default', 'any_path', 'requires')

    def __init__(self, flags: tuple[str, ...], dest: str, kind: str, help: str,
                 metavar: str | None = None, default: str | None = None,
                 any_path: bool = False, requires: str | None = None):
        self.flags, self.dest, self.kind, self.help = flags, dest, kind, help
        self.metavar, self.default, self.any_path, self.requires = metavar, default, any_path, requires


class Argument:
    """The positional argument(s): a path (one, or ``many``; ``any_path`` as
    for Option) or, for ``cc``, the compiler command line, taken as it is."""
    __slots__ = ('dest', 'many', 'any_path', 'command_line')

    def __init__(self, dest: str, many: bool = False, any_path: bool = False,
                 command_line: bool = False):
        self.dest, self.many, self.any_path, self.command_line = dest, many, any_path, command_line


class Command:
    __slots__ = ('name', 'argument', 'options')

    def __init__(self, name: str, argument: Argument, options: tuple[Option, ...]):
        self.name, self.argument, self.options = name, argument, options

    @property
    def interspersed(self) -> bool:
        """Options may follow the arguments (not for a compiler command line)."""
        return not self.argument.command_line


FEATURES = Option(
    ('--btf-features',), 'features', 'features', metavar='LIST',
    help=('Comma list of BTF features, as pahole\'s --btf_features: ' + ', '.join(DEFAULT)
          + ' (the default set, also "default"); ' + ', '.join(OPTIONAL)
          + ' (off unless named). "-NAME" turns one off.'))
BASE = Option(('-B', '--base'), 'base_path', 'path', any_path=True,
              help='Base BTF (vmlinux) for split BTF such as a module\'s.')
DROP_DWARF = Option(
    ('--drop-dwarf',), 'drop_dwarf', 'flag',
    help='Empty the object\'s DWARF sections once its BTF is encoded from them: all of '
         'DWARF\'s facts in the BTF, none of its bytes in the build tree (the kernel '
         'then has no DWARF to debug with).  Also on with OBJBTF_DROP_DWARF=1 in the '
         'environment, which make OBJBTF_DROP_DWARF=1 puts there.')

COMMANDS = {c.name: c for c in (
    Command('encode', Argument('objects', many=True, any_path=True), (
        FEATURES,
        Option(('-q', '--quiet'), 'quiet', 'flag',
               help='No notice for objects without DWARF types.'),
        DROP_DWARF,
    )),
    Command('cc', Argument('command', command_line=True), (FEATURES, DROP_DWARF)),
    Command('dump', Argument('file', any_path=True), (BASE,)),
    Command('check', Argument('file', any_path=True), (
        BASE,
        Option(('--kernel',), 'kernel', 'flag',
               help='Also load the BTF into the running kernel (BPF_BTF_LOAD, needs root) '
                    'and print its verdict and verifier log.'),
    )),
    Command('link', Argument('file', any_path=True), (
        BASE,
        Option(('-o', '--output'), 'output', 'path',
               help='Write here instead of into FILE: a name ending in .o gets an object '
                    'with an alloc, read-only .BTF (like the kernel\'s .btf.vmlinux.bin.o), '
                    'any other name the raw BTF.'),
        Option(('--input-section',), 'input_section', 'text', default='.BTF',
               help='The section of FILE that holds the per-object BTF.'),
        Option(('--split-vars',), 'split_vars', 'path', metavar='FILE',
               help='Write the variables outside .data..percpu (objects encoded with '
                    'global_var) to FILE, as split BTF on top of vmlinux\'s, which keeps '
                    'only the percpu ones.'),
        Option(('--cache',), 'cache', 'path', metavar='FILE',
               help='Keep this link in FILE; a later link whose objects\' types are all '
                    'unchanged (an edit to function bodies) only places the variables '
                    'anew.  Same output either way.  For vmlinux, without --base or '
                    '--split-vars.'),
        Option(('--types-stamp',), 'types_stamp', 'path', metavar='FILE',
               help='Write FILE, a digest of the output BTF as modules see it (all but '
                    'the DATASECs\' sizes and entries), unless it holds that digest '
                    'already: its time then changes only when the types do, and '
                    'Kbuild\'s modules depend on it instead of vmlinux (.btf.vmlinux.types). '
                    'For vmlinux, without --base.'),
        Option(('--base-index',), 'base_index', 'path', metavar='FILE', requires='base_path',
               help='With --base: keep an index of the base\'s BTF in FILE, made by the '
                    'first link that finds it missing or made for another base, and used '
                    'by the next ones (Kbuild: .btf.vmlinux.index, shared by every module '
                    'link).  Same output, a fraction of the work.'),
        Option(('--objects',), 'objects_path', 'path', metavar='LIST', any_path=True,
               help='The objects that went into FILE: a thin archive (vmlinux.a) or a text '
                    'file, one path per line (a module\'s .mod). A listed object without '
                    'BTF in FILE (built without objbtf encode) is an error naming it. Paths '
                    'are compared with the names the objects were encoded under: run the '
                    'link where they were encoded (archive members are relative to the '
                    'archive\'s directory, list lines to the current one).'),
        Option(('--allow-missing',), 'allow_missing', 'flag', requires='objects_path',
               help='With --objects: warn about listed objects without BTF, and link '
                    'the others.'),
        Option(('-j', '--jobs'), 'jobs', 'jobs', metavar='N',
               help='Processes that share the work over the objects: hashing the types '
                    'of a file without .BTF.objbtf, and in the pure-Python build scanning '
                    'the hashes (default: the CPUs this process may use).  The output is '
                    'the same for any N.'),
        Option(('-q', '--quiet'), 'quiet', 'flag',
               help='No summary and no progress; warnings and errors still go to stderr.'),
        FEATURES,
    )),
)}


class Parsed:
    """A command line read by ``parse_fast``: the command and its values by dest."""
    __slots__ = ('command', 'values')

    def __init__(self, command: str, values: dict):
        self.command, self.values = command, values


def parse_fast(argv: list[str]) -> Parsed | None:
    """Read ``argv`` (without the program name) as click would read it, for the
    SERVED commands' plain forms; None when click must read it."""
    if not argv or argv[0] not in SERVED:
        return None
    command = COMMANDS[argv[0]]
    by_flag = {flag: opt for opt in command.options for flag in opt.flags}
    values: dict = {opt.dest: _default(opt) for opt in command.options}
    positional: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == '--':
            positional += args[i:]
            break
        if not arg.startswith('-') or arg == '-':
            positional.append(arg)
            if not command.interspersed:
                positional += args[i:]
                break
            continue
        name, eq, inline = arg.partition('=')
        opt = by_flag.get(name)
        if opt is None or (opt.kind == 'flag' and eq):
            return None
        if opt.kind == 'flag':
            values[opt.dest] = True
            continue
        if not eq:
            if i == len(args):
                return None
            inline = args[i]
            i += 1
        value = _convert(opt, inline)
        if value is None:
            return None
        values[opt.dest] = value
    if any(opt.requires and values[opt.dest] and values[opt.requires] is None
           for opt in command.options):
        return None
    argument = _arguments(command.argument, positional)
    if argument is None:
        return None
    values[command.argument.dest] = argument
    return Parsed(command.name, values)


def _default(opt: Option):
    if opt.kind == 'flag':
        return False
    if opt.kind == 'features':
        return Features()
    return opt.default


def _convert(opt: Option, text: str):
    """The option's value, or None where click would complain."""
    if opt.kind == 'features':
        try:
            return Features.parse(text)
        except ValueError:
            return None
    if opt.kind == 'jobs':
        return int(text) if text.isdigit() and int(text) >= 1 else None
    if opt.kind == 'path' and not _path_ok(text, opt.any_path):
        return None
    return text


def _path_ok(path: str, any_path: bool) -> bool:
    """click.Path(dir_okay=any_path) would take it."""
    return bool(path) and (any_path or not os.path.isdir(path))


def _arguments(arg: Argument, positional: list[str]):
    if not positional:
        return None
    if arg.command_line:
        return positional
    if not all(_path_ok(p, arg.any_path) for p in positional):
        return None
    if arg.many:
        return positional
    return positional[0] if len(positional) == 1 else None
