"""The objbtf command line.

Kept light at import time: ``encode`` and ``cc`` run once per object of a
kernel build, so each subcommand imports what it needs when it runs.
"""
from __future__ import annotations

import os
import sys

import click

from .features import DEFAULT, OPTIONAL, Features

FEATURES_HELP = ('Comma list of BTF features, as pahole\'s --btf_features: '
                 + ', '.join(DEFAULT) + ' (the default set, also "default"); '
                 + ', '.join(OPTIONAL) + ' (off unless named). "-NAME" turns one off.')


def _features(ctx, _param, value: str | None) -> Features:
    try:
        return Features.parse(value)
    except ValueError as err:
        raise click.BadParameter(str(err), ctx=ctx) from None


features_option = click.option('--btf-features', 'features', metavar='LIST', default=None,
                               callback=_features, help=FEATURES_HELP)


@click.group(context_settings={'help_option_names': ['-h', '--help']})
@click.version_option(package_name='objbtf')
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
    """


@main.command()
@click.argument('objects', nargs=-1, required=True, type=click.Path(dir_okay=False))
@features_option
@click.option('-q', '--quiet', is_flag=True, help='No notice for objects without DWARF types.')
def encode(objects: tuple[str, ...], features: Features, quiet: bool) -> None:
    """Encode each object's DWARF as BTF, written into the object.

    Adds (or replaces) a .BTF section and a .rela.BTF (.rel.BTF on REL
    targets) that relocates every DATASEC entry to its variable's symbol,
    and a .BTF.objbtf chunk with the object's name (the path as given) and
    the hashes the link merges by.  An object without DWARF types
    (assembly, -g0) gets a notice and only the chunk, no .BTF: the link
    then knows the object was not left out.  A broken object gets a
    one-line error and stays untouched; the exit status is then 1.
    """
    from .commands import run_encode
    sys.exit(run_encode(list(objects), features, quiet))


@main.command(context_settings={'ignore_unknown_options': True,
                                'allow_interspersed_args': False})
@click.argument('command', nargs=-1, required=True, type=click.UNPROCESSED)
@features_option
def cc(command: tuple[str, ...], features: Features) -> None:
    """Run a compiler, then encode the object it wrote (-o FILE).

    \b
    Example:  objbtf cc -- gcc -g -c -o foo.o foo.c
    Returns the compiler's exit status.  When the compile fails, nothing is
    encoded and the failed output is removed, as make expects.
    """
    from .commands import run_cc
    sys.exit(run_cc(list(command), features))


def _read_or_exit(path: str, base_path: str | None):
    """(raw bytes, base Btf or None) of ``path``, or exit 1 naming the file."""
    from .btf.errors import BtfError
    from .btf_file import load_btf_file, read_btf_bytes
    from .elf.errors import ElfError
    try:
        base = load_btf_file(base_path) if base_path else None
    except (OSError, BtfError, ElfError) as err:
        raise click.ClickException(f'{base_path}: {err}') from None
    try:
        return read_btf_bytes(path), base
    except (OSError, BtfError, ElfError) as err:
        raise click.ClickException(f'{path}: {err}') from None


base_option = click.option('-B', '--base', 'base_path', type=click.Path(dir_okay=False),
                           help='Base BTF (vmlinux) for split BTF such as a module\'s.')


@main.command()
@click.argument('file', type=click.Path(exists=True, dir_okay=False))
@base_option
def dump(file: str, base_path: str | None) -> None:
    """List the BTF of FILE as `bpftool btf dump file` does.

    FILE is an object, a vmlinux or module with a .BTF section, or a raw
    .btf file.  Split BTF (a module's) needs --base vmlinux.
    """
    from .btf.dump import dump_btf
    from .btf.errors import BtfError
    from .btf.reader import parse_btf
    raw, base = _read_or_exit(file, base_path)
    try:
        btf = parse_btf(raw, base)
    except BtfError as err:
        raise click.ClickException(f'{file}: {err}') from None
    out = click.get_text_stream('stdout')
    for line in dump_btf(btf):
        out.write(line + '\n')


@main.command()
@click.argument('file', type=click.Path(exists=True, dir_okay=False))
@base_option
@click.option('--kernel', is_flag=True,
              help='Also load the BTF into the running kernel (BPF_BTF_LOAD, needs root) '
                   'and print its verdict and verifier log.')
def check(file: str, base_path: str | None, kernel: bool) -> None:
    """Check the BTF of FILE against the kernel's BTF rules.

    Prints OK, or the first offending type and what is wrong with it; the
    exit status is 1 when a rule is broken or the kernel rejects the BTF.
    """
    from .btf.validate import validate_bytes
    raw, base = _read_or_exit(file, base_path)
    problems = validate_bytes(raw, base)
    if problems:
        click.echo(f'{file}: {problems[0]}' + (f' (and {len(problems) - 1} more)'
                                                if len(problems) > 1 else ''))
    else:
        click.echo(f'{file}: OK, BTF follows the kernel\'s rules')
    rejected = kernel and not _kernel_verdict(file, raw, base)
    sys.exit(1 if problems or rejected else 0)


def _kernel_verdict(file: str, raw: bytes, base) -> bool:
    from .kernel import load_btf
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
@click.argument('file', type=click.Path(exists=True, dir_okay=False))
@base_option
@click.option('-o', '--output', type=click.Path(dir_okay=False),
              help='Write here instead of into FILE: a name ending in .o gets an object '
                   'with an alloc, read-only .BTF (like the kernel\'s .btf.vmlinux.bin.o), '
                   'any other name the raw BTF.')
@click.option('--input-section', default='.BTF', show_default=True,
              help='The section of FILE that holds the per-object BTF.')
@click.option('--split-vars', type=click.Path(dir_okay=False), metavar='FILE',
              help='Write the variables outside .data..percpu (objects encoded with '
                   'global_var) to FILE, as split BTF on top of vmlinux\'s, which keeps '
                   'only the percpu ones.')
@click.option('--cache', type=click.Path(dir_okay=False), metavar='FILE',
              help='Keep this link in FILE; a later link whose objects\' types are all '
                   'unchanged (an edit to function bodies) only places the variables '
                   'anew.  Same output either way.  For vmlinux, without --base or '
                   '--split-vars.')
@click.option('--objects', 'objects_path', type=click.Path(exists=True, dir_okay=False),
              metavar='LIST',
              help='The objects that went into FILE: a thin archive (vmlinux.a) or a text '
                   'file, one path per line (a module\'s .mod). A listed object without '
                   'BTF in FILE (built without objbtf encode) is an error naming it. Paths '
                   'are compared with the names the objects were encoded under: run the '
                   'link where they were encoded (archive members are relative to the '
                   'archive\'s directory, list lines to the current one).')
@click.option('--allow-missing', is_flag=True,
              help='With --objects: warn about listed objects without BTF, and link '
                   'the others.')
@click.option('-j', '--jobs', type=click.IntRange(min=1), metavar='N',
              help='Processes that share the work over the objects (default: the CPUs '
                   'this process may use).  The output is the same for any N.')
@click.option('-q', '--quiet', is_flag=True,
              help='No summary and no progress; warnings and errors still go to stderr.')
@features_option
def link(file: str, base_path: str | None, output: str | None, input_section: str,
         split_vars: str | None, cache: str | None, objects_path: str | None,
         allow_missing: bool, jobs: int | None, quiet: bool, features: Features) -> None:
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
    only), dedup (libbpf's btf__dedup), emit.
    \b
    Every object must have been encoded by this objbtf (its .BTF.objbtf
    format and hash scheme): others are named, to be rebuilt.  A FILE with
    no .BTF.objbtf at all has its objects' types hashed by the link's -j
    processes, slower but to the same BTF.  The link only sees the objects
    that have BTF; --objects gives it the list of all of them, so that one
    compiled without objbtf is not silently left out.  A summary goes to stderr, unless --quiet (Kbuild: unless V=1).
    With --cache, a relink after edits that changed no type (function
    bodies) reuses the last link and only places the variables anew.
    \b
    Examples:
      objbtf link --objects vmlinux.a --cache .btf.vmlinux.cache \\
                  --output .btf.vmlinux.bin.o .tmp_vmlinux.btf
      objbtf link --base vmlinux --objects drivers/net/veth.mod drivers/net/veth.ko
    """
    from linkdedup.objects import ObjectList, ObjectsError
    from linkdedup.pipeline import LinkError, Progress, link as run_link
    from linkdedup.workers import WorkerError, default_jobs
    from .btf.errors import BtfError
    from .elf.errors import ElfError
    if allow_missing and objects_path is None:
        raise click.UsageError('--allow-missing needs --objects LIST')
    try:
        objects = ObjectList(objects_path, allow_missing) if objects_path else None
        summary = run_link(file, features=features, base_path=base_path, output=output,
                           section=input_section, split_vars=split_vars, cache=cache,
                           objects=objects, jobs=jobs or default_jobs(),
                           progress=Progress(sys.stderr.isatty() and not quiet))
    except (LinkError, ObjectsError, WorkerError) as err:
        raise click.ClickException(str(err)) from None
    except (BtfError, ElfError) as err:
        raise click.ClickException(f'{file}: {err}') from None
    except OSError as err:
        raise click.ClickException(f'{err.filename or file}: {err.strerror}') from None
    if not quiet:
        for line in summary.lines():
            click.echo(line, err=True)
