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

from .concat import Blob, canonical_order, split_blobs
from .merge import merge_blobs
from .datasec import rebuild_datasecs
from .emit import emit
from .functions import STT_FUNC, FunctionReport, check_functions
from .objects import ObjectList, ObjectsError, refuse_foreign
from .relocate import place_variables
from .split_vars import split_variables
from .tombstone import Tombstones


class LinkError(Exception):
    """The link cannot go on; the message names the file and the problem."""


class Summary:
    def __init__(self):
        self.objects = 0
        self.typeless = 0
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
        typeless = f' (and {self.typeless} without types)' if self.typeless else ''
        out = [f'objbtf link: {self.objects} objects{typeless}, {self.types_in} types in, '
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
    """Step names on stderr while on a terminal, nothing otherwise; and warnings."""

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

    def warn(self, message: str) -> None:
        """A warning on a line of its own, whatever the progress line shows."""
        self.done()
        print(f'objbtf link: warning: {message}', file=sys.stderr, flush=True)


def link(path: str, *, features: Features, base_path: str | None = None,
         output: str | None = None, section: str = '.BTF', split_vars: str | None = None,
         objects: ObjectList | None = None, progress: Progress | None = None) -> Summary:
    """Turn the per-object BTF in ``path`` into its final BTF; with
    ``split_vars``, the non-percpu variables go there, as split BTF; with
    ``objects``, every object it lists must have BTF in ``path``."""
    progress = progress or Progress(False)
    summary = Summary()
    started = time.monotonic()
    base = _load_base(base_path) if base_path else None
    with ElfFile.open(path) as elf:
        btf = prepare(elf, path, section, base, features, progress, summary, objects=objects)
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
            progress: Progress, summary: Summary, use_hashes: bool = True,
            objects: ObjectList | None = None) -> Btf:
    """The passes before dedup: the table dedup turns into the final BTF.

    ``use_hashes=False`` concatenates every type as it is, without merging
    by hash: what libbpf's dedup would be given (the tests compare the two).
    """
    sec = elf.section_by_name(section)
    if sec is None or sec.size == 0:
        raise LinkError(f'{path}: no {section} section: were the objects encoded '
                        '(objbtf encode) and linked with their .BTF?')
    progress.step('concatenate')
    chunks = _chunks(elf, path, objects, progress) if use_hashes else None
    if chunks is None:
        blobs = split_blobs(elf.section_view(sec))
        sidecars = None
    else:
        sidecars = [c for c in chunks if c.has_btf]
        blobs = split_blobs(elf.section_view(sec), [c.name for c in sidecars])
        _check_pairs(path, blobs, sidecars)
        summary.typeless = len(chunks) - len(sidecars)
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


def _chunks(elf: ElfFile, path: str, objects: ObjectList | None,
            progress: Progress) -> list[Sidecar] | None:
    """Every object's .BTF.objbtf chunk, all of this objbtf's format and
    hashing, and naming every object of ``objects``; None (and a slower
    link) when the file has none."""
    sec = elf.section_by_name(SIDECAR)
    if sec is None:
        if objects is not None:
            raise LinkError(f'{path}: no {SIDECAR} section, which names the objects: '
                            f'cannot check them against {objects.path}')
        progress.warn(f'{path}: no {SIDECAR} section, merging without hashes (slow)')
        return None
    if sec.size == 0:
        raise LinkError(f'{path}: {SIDECAR} is empty: its BTF was linked already (the link '
                        'empties it); link it again from its objects')
    chunks = split_sidecars(elf.section_view(sec), elf.byteorder)
    try:
        refuse_foreign(chunks)
        warning = objects.check(chunks) if objects is not None else None
    except ObjectsError as err:
        raise LinkError(f'{path}: {err}') from None
    if warning:
        progress.warn(f'{path}: {warning}')
    return chunks


def _check_pairs(path: str, blobs: list[Blob], sidecars: list[Sidecar]) -> None:
    """Chunk i (of those with types) describes blob i: ld put both in link order."""
    for blob, chunk in zip(blobs, sidecars):
        if chunk.btf_size != len(blob.data):
            raise LinkError(f'{path}: {SIDECAR} does not describe the .BTF blobs: the chunk of '
                            f'{chunk.name} is for {chunk.btf_size} bytes of BTF, '
                            f'{blob.label} has {len(blob.data)}: was some object given .BTF '
                            'by another tool?')
    if len(sidecars) != len(blobs):
        raise LinkError(f'{path}: {SIDECAR} does not describe the .BTF blobs '
                        f'({len(sidecars)} chunks with types for {len(blobs)} blobs): '
                        'was some object given .BTF by another tool?')


def _load_base(path: str) -> Btf:
    from objbtf.btf_file import load_btf_file
    try:
        return load_btf_file(path)
    except (OSError, BtfError) as err:
        raise LinkError(f'{path}: cannot read the base BTF: {err}') from None

