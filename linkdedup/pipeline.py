"""``objbtf link``: the passes in order, with progress and a summary."""
from __future__ import annotations

import sys
import time

from objbtf.btf.dedup import dedup
from objbtf.btf.errors import BtfError
from objbtf.btf.sidecar import SECTION as SIDECAR, Sidecar, split_sidecars
from objbtf.btf.types import Btf
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile
from objbtf.elf.writer import write_atomically
from objbtf.features import Features

from .concat import canonical_order, split_blobs
from .merge import merge_blobs
from .datasec import rebuild_datasecs
from .emit import emit
from .functions import STT_FUNC, FunctionReport, check_functions
from .relocate import place_variables
from .split_vars import split_variables
from .tombstone import Tombstones


class LinkError(Exception):
    """The link cannot go on; the message names the file and the problem."""


class Summary:
    def __init__(self):
        self.objects = 0
        self.types_in = 0
        self.merged = 0
        self.types_out = 0
        self.variables = 0
        self.functions: FunctionReport | None = None
        self.seconds = 0.0
        self.written = ''
        self.split = ''

    def lines(self) -> list[str]:
        f = self.functions
        out = [f'objbtf link: {self.objects} objects, {self.types_in} types in, '
               f'{self.merged} after merging by hash, {self.types_out} types out, '
               f'{self.variables} variables, '
               f'{self.seconds:.1f} s -> {self.written}']
        if self.split:
            out.append(f'  split off: {self.split}')
        if f is not None and f.dropped:
            out.append(f'  functions dropped: {len(f.inconsistent)} with prototypes that '
                       f'differ between objects, {len(f.ambiguous)} at several addresses')
        return out


class Progress:
    """Step names on stderr while on a terminal, nothing otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.monotonic()

    def step(self, what: str) -> None:
        if self.enabled:
            print(f'\r  [{time.monotonic() - self.start:5.1f}s] {what:<60}', end='',
                  file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.enabled:
            print('\r' + ' ' * 72 + '\r', end='', file=sys.stderr, flush=True)


def link(path: str, *, features: Features, base_path: str | None = None,
         output: str | None = None, section: str = '.BTF', split_vars: str | None = None,
         progress: Progress | None = None) -> Summary:
    """Turn the per-object BTF in ``path`` into its final BTF; with
    ``split_vars``, the non-percpu variables go there, as split BTF."""
    progress = progress or Progress(False)
    summary = Summary()
    started = time.monotonic()
    base = _load_base(base_path) if base_path else None
    with ElfFile.open(path) as elf:
        btf = prepare(elf, path, section, base, features, progress, summary)
        progress.step(f'dedup {len(btf)} types')
        final = dedup(btf)
        summary.types_out = len(final)
        progress.step('emit')
        raw = encode_btf(final)
        if split_vars is not None:
            if base is not None:
                raise LinkError(f'{path}: --split-vars is for vmlinux, not for a module')
            raw, split_raw, moved = split_variables(final)
            if not moved:
                raise LinkError(f'{path}: no variables outside .data..percpu to split off: '
                                'encode the objects with --btf-features default,global_var')
            write_atomically(split_vars, [split_raw])
            summary.split = f'{moved} variables to {split_vars}'
        summary.written = emit(raw, elf, path, section, output)
    progress.done()
    summary.seconds = time.monotonic() - started
    return summary


def prepare(elf: ElfFile, path: str, section: str, base: Btf | None, features: Features,
            progress: Progress, summary: Summary, use_hashes: bool = True) -> Btf:
    """The passes before dedup: the table dedup turns into the final BTF.

    ``use_hashes=False`` concatenates every type as it is, without merging
    by hash: what libbpf's dedup would be given (the tests compare the two).
    """
    sec = elf.section_by_name(section)
    if sec is None or sec.size == 0:
        raise LinkError(f'{path}: no {section} section: were the objects encoded '
                        '(objbtf encode) and linked with their .BTF?')
    progress.step('concatenate')
    blobs = split_blobs(elf.section_view(sec))
    sidecars = _sidecars(elf, path, blobs) if use_hashes else None
    table = merge_blobs(canonical_order(blobs, sidecars), sidecars, base, elf.byteorder)
    btf = table.btf
    summary.objects = len(blobs)
    summary.types_in = table.types_in
    summary.merged = len(btf)
    progress.step('relocate')
    placed = place_variables(elf, btf, blobs, sec, table.locate)
    graves = Tombstones(btf)
    progress.step('datasec')
    summary.variables = rebuild_datasecs(btf, placed, graves)
    progress.step('functions')
    summary.functions = check_functions(btf, elf.typed_symbols(STT_FUNC), graves,
                                        features.consistent_func)
    return btf


def _sidecars(elf: ElfFile, path: str, blobs: list) -> list[Sidecar] | None:
    """The objects' .BTF.objbtf chunks, checked against their blobs; None (and
    a slower link) when the file has none."""
    sec = elf.section_by_name(SIDECAR)
    if sec is None:
        print(f'objbtf link: {path}: no {SIDECAR} section, merging without hashes (slow)',
              file=sys.stderr)
        return None
    sidecars = split_sidecars(elf.section_view(sec), elf.byteorder)
    if len(sidecars) != len(blobs) or any(s.btf_size != len(b.data)
                                          for s, b in zip(sidecars, blobs)):
        raise LinkError(f'{path}: {SIDECAR} does not describe the .BTF blobs '
                        f'({len(sidecars)} chunks for {len(blobs)} blobs): were some objects '
                        'encoded by another tool or version?')
    return sidecars


def _load_base(path: str) -> Btf:
    from objbtf.btf_file import load_btf_file
    try:
        return load_btf_file(path)
    except (OSError, BtfError) as err:
        raise LinkError(f'{path}: cannot read the base BTF: {err}') from None

