"""The objbtf command line.

Kept light at import time: ``encode`` and ``cc`` run once per object of a
kernel build, so each subcommand imports what it needs when it runs.
"""
from __future__ import annotations

import os
import sys

import click

from .. import implementation
from ..features import Features
from .options import COMMANDS, Option


def _features(ctx, _param, value: str | None) -> Features:
    try:
        return Features.parse(value)
    except ValueError as err:
        raise click.BadParameter(str(err), ctx=ctx) from None


def _click_option(opt: Option):
    """The click option for one entry of the command-line table."""
    kw: dict = {'help': opt.help, 'metavar': opt.metavar}
    if opt.kind == 'flag':
        kw['is_flag'] = True
    elif opt.kind == 'path':
        kw['type'] = click.Path(dir_okay=opt.any_path)
    elif opt.kind == 'jobs':
        kw['type'] = click.IntRange(min=1)
    elif opt.kind == 'features':
        kw['callback'] = _features
    elif opt.default is not None:
        kw.update(default=opt.default, show_default=True)
    return click.option(*opt.flags, opt.dest, **kw)


def _from_table(name: str):
    """Give a click command the argument and options the table declares for it."""
    command = COMMANDS[name]

    def declare(f):
        for opt in reversed(command.options):
            f = _click_option(opt)(f)
        arg = command.argument
        if arg.command_line:
            kw = {'nargs': -1, 'required': True, 'type': click.UNPROCESSED}
        else:
            kw = {'type': click.Path(dir_okay=arg.any_path)}
            if arg.many:
                kw.update(nargs=-1, required=True)
        return click.argument(arg.dest, **kw)(f)
    return declare


def _check_requires(name: str, values: dict) -> None:
    """The table's ``requires``: an option that needs another one."""
    options = {opt.dest: opt for opt in COMMANDS[name].options}
    for opt in options.values():
        needed = options.get(opt.requires) if opt.requires else None
        if needed and values[opt.dest] and values[needed.dest] is None:
            what = f' {needed.metavar}' if needed.metavar else ''
            raise click.UsageError(f'{opt.flags[-1]} needs {needed.flags[-1]}{what}')


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """The version, how it runs, and the digest of the sources it runs:
    two installs of one version from different checkouts tell apart."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from ..source_digest import source_digest
    sources = source_digest('objbtf', 'linkdedup').hex()[:12]
    click.echo(f'objbtf, version {version("objbtf")}, {implementation()}, sources {sources}')
    ctx.exit()


@click.group(context_settings={'help_option_names': ['-h', '--help']})
@click.option('--version', is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help='Show the version and exit.')
def main() -> None:
    """Per-object BTF for Linux kernel builds.

    \b
    Per object, right after it is compiled:
      objbtf encode FILE.o...        add .BTF and .rela.BTF to each object
      objbtf cc -- gcc ARGS...       compile, then encode the -o object
    At vmlinux link:
      objbtf link vmlinux            merge the per-object BTF into vmlinux
    Looking at BTF:
      objbtf dump FILE               bpftool-style listing
      objbtf check FILE [--kernel]   the kernel's BTF rules, or the kernel itself
      objbtf diff A B                what differs between two BTFs, by name
    With ccache:
      objbtf cache stats             the encode cache's hits, misses and size
    """


@main.command()
@_from_table('encode')
def encode(objects: tuple[str, ...], features: Features, quiet: bool, drop_dwarf: bool) -> None:
    """Encode each object's DWARF as BTF, written into the object.

    Adds (or replaces) a .BTF section and a .rela.BTF (.rel.BTF on REL
    targets) that relocates every DATASEC entry to its variable's symbol,
    and a .BTF.objbtf chunk with the object's name (the path as given) and
    the hashes the link merges by.  An object compiled with gcc -gbtf
    carries GCC's own BTF: that is read instead of DWARF (much cheaper;
    with no -g at all, it is the DWARF-less build).  Assembly without -g
    gets the FUNCs gas's DWARF would give its functions, from its symbols.
    An object without types (-g0) gets a notice and only the chunk, no
    .BTF: the link then knows the object was not left out.  A broken
    object gets a one-line error and stays untouched; the exit status is
    then 1.

    With OBJBTF_CACHE_DIR=DIR in the environment, each encode is kept in
    DIR by the object's bytes, path and features and objbtf's code, and an
    object seen before (one ccache restored) gets the kept sections
    without encoding; OBJBTF_CACHE_SIZE (default 2G) bounds DIR.

    With --drop-dwarf (or OBJBTF_DROP_DWARF=1) the object's DWARF sections
    are emptied once it is encoded: the BTF of a DWARF build in a tree the
    size of a DWARF-less one's.  Such an object cannot be encoded again.
    """
    from .commands import run_encode
    sys.exit(run_encode(list(objects), features, quiet, drop_dwarf))


@main.command(context_settings={'ignore_unknown_options': True,
                                'allow_interspersed_args': False})
@_from_table('cc')
def cc(command: tuple[str, ...], features: Features, drop_dwarf: bool) -> None:
    """Run a compiler, then encode the object it wrote (-o FILE).

    \b
    Example:  objbtf cc -- gcc -g -c -o foo.o foo.c
    Returns the compiler's exit status.  When the compile fails, nothing is
    encoded and the failed output is removed, as make expects.  The encode
    uses OBJBTF_CACHE_DIR as objbtf encode does (see its --help).
    """
    from .commands import run_cc
    sys.exit(run_cc(list(command), features, drop_dwarf))


def _read_or_exit(path: str, base_path: str | None):
    """(raw bytes, base Btf or None, pointer size: ``read_split``) of
    ``path``, or exit 1 naming the file."""
    from ..btf_file import load_btf_file, read_split
    from ..errors import ObjbtfError
    from ..regular_files import error_text
    try:
        base = load_btf_file(base_path) if base_path else None
    except (OSError, ObjbtfError) as err:
        raise click.ClickException(f'{base_path}: {error_text(err)}') from None
    try:
        raw, base, pointer_size = read_split(path, base)
    except (OSError, ObjbtfError) as err:
        raise click.ClickException(f'{path}: {error_text(err)}') from None
    return raw, base, pointer_size


@main.command()
@_from_table('dump')
def dump(file: str, base_path: str | None) -> None:
    """List the BTF of FILE as `bpftool btf dump file` does.

    FILE is an object, a vmlinux or module with a .BTF section, or a raw
    .btf file.  Split BTF (a module's) needs --base vmlinux.  A module
    with a distilled base (.BTF.base, an out-of-tree module's) is read as
    the kernel loads it: relocated onto --base, or without it on its
    distilled base.
    """
    from ..btf.dump import dump_btf
    from ..btf.errors import BtfError
    from ..btf.reader import parse_btf
    raw, base, _pointer_size = _read_or_exit(file, base_path)
    try:
        btf = parse_btf(raw, base)
    except BtfError as err:
        raise click.ClickException(f'{file}: {err}') from None
    for line in dump_btf(btf):
        click.echo(line)


@main.command()
@_from_table('check')
def check(file: str, base_path: str | None, kernel: bool) -> None:
    """Check the BTF of FILE against the kernel's BTF rules.

    Prints OK, or the first offending type and what is wrong with it; the
    exit status is 1 when a rule is broken or the kernel rejects the BTF.
    An object encoded from GCC's BTF (gcc -gbtf) also gets a line per kind
    of loss its encode counted there (enums that lost enumerators past 32
    bits), which fails nothing.
    """
    from ..btf.validate import validate_bytes
    raw, base, pointer_size = _read_or_exit(file, base_path)
    problems = validate_bytes(raw, base, ptr_size=pointer_size)
    if problems:
        click.echo(f'{file}: {problems[0]}' + (f' (and {len(problems) - 1} more)'
                                                if len(problems) > 1 else ''))
    else:
        click.echo(f'{file}: OK, BTF follows the kernel\'s rules')
    for line in _loss_lines(file):
        click.echo(line)
    rejected = kernel and not _kernel_verdict(file, raw, base)
    sys.exit(1 if problems or rejected else 0)


def _loss_lines(file: str) -> list[str]:
    """What the compiler's BTF of each object in ``file`` lost, as its
    chunk counted it: a line per object and kind of loss, naming the enums.
    Nothing for a file without chunks, or whose chunks cannot be read:
    the check is of the BTF, and the link names a broken chunk."""
    from ..btf.chunk import LOSSES
    from ..btf_file import chunks_of
    from ..errors import ObjbtfError, shown
    try:
        chunks = chunks_of(file)
    except (OSError, ObjbtfError):
        return []
    out = []
    for chunk in chunks:
        where = file if len(chunks) == 1 else f'{file}: {chunk.label}'
        by_kind: dict[int, list[str]] = {}
        for lost, name in chunk.losses:
            by_kind.setdefault(lost, []).append(f'enum {shown(name) or "(anon)"}')
        for lost, enums in sorted(by_kind.items()):
            what = LOSSES.get(lost, f'something (loss {lost}) of')
            out.append(f"{where}: its compiler's BTF lost {what} {', '.join(enums)} "
                       '(docs/dwarfless.md)')
    return out


def _kernel_verdict(file: str, raw: bytes, base) -> bool:
    from ..inspect.kernel_load import load_btf
    try:
        verdict = load_btf(raw, base)
    except (OSError, NotImplementedError) as err:
        raise click.ClickException(f'{file}: cannot ask the kernel: {err}') from None
    if verdict.ok:
        click.echo(f'{file}: the running kernel accepts it')
        return True
    click.echo(f'{file}: the running kernel rejects it ({os.strerror(verdict.errno)}); '
               'its verifier log:')
    click.echo(verdict.log.rstrip())
    return False


@main.command()
@_from_table('link')
def link(**values) -> None:
    """Merge the per-object BTF of a linked FILE into its final BTF.

    \b
    FILE is the kernel's temporary vmlinux (.tmp_vmlinux.btf), linked from
    encoded objects: ld concatenated their .BTF and applied .rela.BTF, so
    every variable's address is known.  Or, with --base vmlinux, a module
    (.ko), which gets split BTF on top of vmlinux's.
    \b
    The passes: concatenate, relocate (variables to output sections),
    datasec (one per output section), functions (drop names whose
    prototypes differ between objects or that sit at several addresses),
    kfuncs (a bpf_kfunc DECL_TAG on each kfunc .BTF_ids lists; vmlinux
    only), dedup (libbpf's btf__dedup), distill (with distilled_base, a
    module's split BTF on a distilled base of its own, written beside it
    as .BTF.base: an out-of-tree module's), emit.
    \b
    Every object must have been encoded by this objbtf (its .BTF.objbtf
    format and hash scheme): others are named, to be rebuilt.  A FILE with
    no .BTF.objbtf at all has its objects' types hashed by the link's -j
    processes, slower but to the same BTF.  The link only sees the objects
    that have BTF; --objects gives it the list of all of them, so that one
    compiled without objbtf is not silently left out.  With --cache, a
    relink after edits that changed no type (function bodies) reuses the
    last link and only places the variables anew; with --types-stamp, the
    stamp file changes only when the types do.  A summary goes to
    stderr, unless --quiet (Kbuild: unless V=1); a link that is not a
    module's, of objects whose BTF came from GCC's -gbtf, then says in two
    lines, even with --quiet, what that BTF lacks (docs/dwarfless.md).
    \b
    Examples:
      objbtf link --objects vmlinux.a --cache .btf.vmlinux.cache \\
                  --types-stamp .btf.vmlinux.types \\
                  --output .btf.vmlinux.bin.o .tmp_vmlinux.btf
      objbtf link --base vmlinux --base-index .btf.vmlinux.index \\
                  --objects drivers/net/veth.mod drivers/net/veth.ko
    """
    from linkdedup.settings import LinkSettings
    from .commands import Failure, run_link
    _check_requires('link', values)
    try:
        lines = run_link(LinkSettings(**values))
    except Failure as err:
        raise click.ClickException(str(err)) from None
    for line in lines:
        click.echo(line, err=True)


@main.group()
def server() -> None:
    """The resident server of the build tree in the current directory.

    \b
    encode, cc and link run in a warm server process, one per build tree,
    user and objbtf version, started by the first command that finds none
    and gone after OBJBTF_RESIDENT_IDLE seconds (default 30) without work.
    OBJBTF_RESIDENT=0 runs every command in its own process instead.
    """


@server.command()
def status() -> None:
    """Print each server of this tree (pid, version digest, requests, ...);
    exit status 1 when there is none."""
    from ..resident.client import control
    answers = control('status')
    for answer in answers:
        click.echo(' '.join(f'{k}={v}' for k, v in answer.items()))
    if not answers:
        click.echo(f'no objbtf server for {os.getcwd()}')
        sys.exit(1)


@server.command()
def stop() -> None:
    """Stop every server of this tree, after the commands they are running;
    each one logs its CPU to OBJBTF_SERVER_LOG if its starter set it."""
    from ..resident.client import control
    for answer in control('stop'):
        click.echo(f'stopped pid={answer["pid"]} requests={answer["requests"]}')


@server.command()
@click.option('--start', is_flag=True,
              help='Also start the server of this tree in the background, unless one runs '
                   '(Kbuild asks with it once per build that compiles: the server is then '
                   'warm when the first object is encoded).')
def command(start: bool) -> None:
    """Print the quickest command line that runs objbtf through the server,
    for OBJBTF=: the client in C (objbtf-client, built at install), else
    the interpreter without site (-S) on the bare Python client."""
    from ..resident.native_client import print_command
    print_command(start)


@main.group()
def cache() -> None:
    """The encode cache, for builds with ccache.

    \b
    With OBJBTF_CACHE_DIR=DIR in the environment, encode and cc keep what
    they write into each object; an object whose bytes, path, features and
    objbtf version were seen before gets the kept sections instead of an
    encode. OBJBTF_CACHE_SIZE bounds it (default 2G).
    """


_CACHE_DIR = click.option(
    '--dir', 'directory', type=click.Path(file_okay=False), metavar='DIR',
    help='The cache to look at (default: $OBJBTF_CACHE_DIR).')


def _cache(directory: str | None):
    """The cache in ``directory`` or OBJBTF_CACHE_DIR, with the size
    OBJBTF_CACHE_SIZE gives; a usage error without either directory."""
    from ..encode.cache import DIR_VARIABLE, SIZE_VARIABLE, CacheConfigError, EncodeCache, parse_size
    root = directory or os.environ.get(DIR_VARIABLE)
    if not root:
        raise click.UsageError(f'no encode cache: set {DIR_VARIABLE} or give --dir DIR')
    try:
        return EncodeCache(root, parse_size(os.environ.get(SIZE_VARIABLE) or ''))
    except CacheConfigError as err:
        raise click.ClickException(str(err)) from None


def _cache_failure(cache, err: OSError) -> click.ClickException:
    from ..regular_files import error_text
    if isinstance(err, FileNotFoundError) and err.filename == cache.root:
        return click.ClickException(f'{cache.root}: no encode cache there (no such directory)')
    return click.ClickException(f'{err.filename or cache.root}: {error_text(err)}')


@cache.command()
@_CACHE_DIR
def stats(directory: str | None) -> None:
    """Print the cache's entries and size, and its hits and misses since
    the counters were zeroed: a hit is an object given the kept sections,
    a miss an object encoded and kept (objects without types are neither)."""
    c = _cache(directory)
    try:
        st = c.stats()
    except OSError as err:
        raise _cache_failure(c, err) from None
    looked = st.hits + st.misses
    rate = f'{100 * st.hits / looked:.1f} %' if looked else '-'
    click.echo(f'cache directory  {c.root}\n'
               f'entries          {st.entries}\n'
               f'size             {st.size / (1 << 20):.1f} MiB ({st.size} bytes), '
               f'at most {c.max_size / (1 << 20):.0f} MiB\n'
               f'hits             {st.hits}\n'
               f'misses           {st.misses}\n'
               f'hit rate         {rate}')


@cache.command()
@_CACHE_DIR
def clear(directory: str | None) -> None:
    """Remove every entry of the cache and zero its counters."""
    c = _cache(directory)
    try:
        removed = c.clear()
    except OSError as err:
        raise _cache_failure(c, err) from None
    click.echo(f'removed {removed} entries from {c.root}; counters zeroed')


@main.command()
@click.argument('a', type=click.Path(dir_okay=False))
@click.argument('b', type=click.Path(dir_okay=False))
@click.option('-B', '--base', 'base_path', type=click.Path(dir_okay=False),
              help='Base BTF (vmlinux) of split BTF such as a module\'s, for both sides.')
@click.option('--base-b', type=click.Path(dir_okay=False),
              help='Another base for B (default: --base).')
@click.option('--format', 'fmt', type=click.Choice(['text', 'json']), default='text',
              show_default=True, help='json: one document, for scripts.')
def diff(a: str, b: str, base_path: str | None, base_b: str | None, fmt: str) -> None:
    """What differs from the BTF of A to that of B, by name.

    \b
    A and B: raw .btf files, objects, a vmlinux, or modules (with --base).
    Three sections, each "N added, N removed, N changed", then the entries
    ("+" only in B, "-" only in A, "~" in both, declared otherwise):
      functions   FUNCs by name, compared by prototype (with parameter names)
      types       named types by kind and name, compared by declaration
                  (size, members with types and offsets, enumerators, ...)
      variables   VARs by name, compared by type, linkage and DATASEC
    Type ids never matter; anonymous types count through the named types
    that use them.
    \b
    Exit status: 0 equal, 1 different, 2 an input cannot be read.
    Example:  objbtf diff --format json vmlinux.before vmlinux.after
    """
    from ..inspect.diff import run_diff
    sys.exit(run_diff(a, b, base_path, base_b, fmt))
