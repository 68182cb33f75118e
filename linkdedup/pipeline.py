"""``objbtf link``: the passes in order, with progress and a summary."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

from objbtf.btf.dedup import dedup
from objbtf.btf.errors import BtfError
from objbtf.btf.kinds import BTF_HEADER_LEN
from objbtf.btf.sidecar import SECTION as SIDECAR
from objbtf.btf.sidecar import Sidecar, split_sidecars
from objbtf.btf.types import Btf, gc_paused
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile, Section
from objbtf.elf.writer import write_atomically
from objbtf.features import Features

from . import cache as link_cache
from .concat import Blob, canonical_order, split_blobs
from .datasec import rebuild_datasecs
from .emit import emit
from .functions import STT_FUNC, FunctionReport, ambiguous_names, check_functions
from .kfuncs import KfuncReport, Kfuncs, find_kfuncs, tag_kfuncs
from .merge import merge_blobs
from .objects import ObjectList, ObjectsError, refuse_foreign
from .rehash import hashed_chunk, unmerged_chunk
from .relocate import Field, entry_fields, place_variables
from .split_vars import split_variables
from .tombstone import Tombstones
from .workers import run_sharded


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
        self.kfuncs = KfuncReport()
        self.seconds = 0.0
        self.written = ''
        self.split = ''
        self.replayed = False
        self.typeless = 0

    def cacheable(self) -> dict:
        """What a replay of this link reports again."""
        f = self.functions or FunctionReport()
        return {'objects': self.objects, 'types_in': self.types_in, 'merged': self.merged,
                'types_out': self.types_out, 'variables': self.variables,
                'inconsistent': f.inconsistent, 'ambiguous': f.ambiguous,
                'kfuncs_tagged': self.kfuncs.tagged, 'kfuncs_missing': self.kfuncs.missing}

    def restore(self, cached: dict) -> None:
        for name in ('objects', 'types_in', 'merged', 'types_out', 'variables'):
            setattr(self, name, cached[name])
        self.functions = FunctionReport()
        self.functions.inconsistent = cached['inconsistent']
        self.functions.ambiguous = cached['ambiguous']
        self.kfuncs = KfuncReport(cached['kfuncs_tagged'], cached['kfuncs_missing'])
        self.replayed = True

    def lines(self) -> list[str]:
        f = self.functions
        how = ' (replayed from the cache)' if self.replayed else ''
        typeless = f' (and {self.typeless} without types)' if self.typeless else ''
        out = [f'objbtf link: {self.objects} objects{typeless}, {self.types_in} types in, '
               f'{self.merged} after merging by hash, {self.types_out} types out, '
               f'{self.variables} variables, '
               f'{self.seconds:.1f} s{how} -> {self.written}']
        if self.split:
            out.append(f'  split off: {self.split}')
        if f is not None and f.dropped:
            out.append(f'  functions dropped: {len(f.inconsistent)} with prototypes that '
                       f'differ between objects, {len(f.ambiguous)} at several addresses')
        k = self.kfuncs
        if k.tagged or k.missing:
            out.append(f'  kfuncs: {len(k.tagged) + len(k.missing)} in .BTF_ids, '
                       f'{len(k.tagged)} tagged bpf_kfunc, {len(k.missing)} without a FUNC')
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
         cache: str | None = None, objects: ObjectList | None = None,
         jobs: int = 1, progress: Progress | None = None) -> Summary:
    """Turn the per-object BTF in ``path`` into its final BTF; with
    ``split_vars``, the non-percpu variables go there, as split BTF; with
    ``cache``, a link whose objects' types are those of the last one
    replays it (``cache.py``); with ``objects``, every object it lists must
    have BTF in ``path``; ``jobs`` processes share the work over the
    objects (``workers.py``), with the same output for any number."""
    progress = progress or Progress(False)
    summary = Summary()
    started = time.monotonic()
    if cache is not None and (base_path or split_vars):
        raise LinkError(f'{path}: --cache is for vmlinux, without --base or --split-vars')
    with gc_paused():        # the link builds tens of thousands of types, and no cycles
        _link(path, features, base_path, output, section, split_vars, cache, objects,
              jobs, progress, summary)
    progress.done()
    summary.seconds = time.monotonic() - started
    return summary


def _link(path: str, features: Features, base_path: str | None, output: str | None,
          section: str, split_vars: str | None, cache: str | None,
          objects: ObjectList | None, jobs: int, progress: Progress, summary: Summary) -> None:
    """``link``'s work, filling in ``summary``."""
    base = _load_base(base_path) if base_path else None
    with ElfFile.open(path) as elf:
        inputs = read_inputs(elf, path, section, progress, objects, jobs)
        summary.typeless = inputs.typeless
        symbols = FromSymbols(elf, features, module=base is not None)
        key = raw = None
        if cache is not None:
            key = link_cache.cache_key(inputs.sidecars, symbols.ambiguous, symbols.kfuncs,
                                       features.names(), section)
            raw = _replay(cache, key, elf, inputs, summary)
        if raw is None:
            raw = _full_link(elf, path, inputs, base, features, symbols, split_vars, jobs,
                             progress, summary, cache and (cache, key))
        summary.written = emit(raw, elf, path, section, output)


def _full_link(elf: ElfFile, path: str, inputs: Inputs, base: Btf | None, features: Features,
               symbols: FromSymbols, split_vars: str | None, jobs: int, progress: Progress,
               summary: Summary, cache: tuple[str, bytes] | None) -> bytes:
    """The passes, dedup and encoding: the final BTF; kept in ``cache``
    (path, key) when given one."""
    prepared = prepare(elf, inputs, base, features, symbols, progress, summary, jobs)
    progress.step(f'dedup {len(prepared.btf)} types')
    final = dedup(prepared.btf)
    summary.types_out = len(final)
    progress.step('emit')
    offsets: list[int] = []
    raw = encode_btf(final, offsets)
    if split_vars is not None:
        if base is not None:
            raise LinkError(f'{path}: --split-vars is for vmlinux, not for a module')
        raw, split_raw, moved = split_variables(final)
        if not moved:
            raise LinkError(f'{path}: no variables outside .data..percpu to split off: '
                            'encode the objects with --btf-features default,global_var')
        write_atomically(split_vars, [split_raw])
        summary.split = f'{moved} variables to {split_vars}'
    if cache is not None:
        datasecs = link_cache.describe_datasecs(final, offsets, prepared.layout, BTF_HEADER_LEN)
        if datasecs is not None:
            link_cache.store(cache[0], cache[1],
                             link_cache.CachedLink(raw, datasecs, summary.cacheable()))
    return raw


def _replay(cache: str, key: bytes, elf: ElfFile, inputs: Inputs, summary: Summary) -> bytes | None:
    """The final BTF from ``cache`` if it holds a link made with ``key``."""
    cached = link_cache.load(cache, key)
    if cached is None:
        return None
    raw = link_cache.replay(cached, elf, inputs.section, inputs.blobs)
    if raw is not None:
        summary.restore(cached.summary)
    return raw


class FromSymbols:
    """What the passes take from the linked file's symbols: the function
    names at several addresses (functions pass) and, for vmlinux with
    ``decl_tag_kfuncs`` and ``decl_tag`` (pahole needs both), the kfuncs of
    ``.BTF_ids`` (kfuncs pass).  Modules get no kfunc tags yet."""

    def __init__(self, elf: ElfFile, features: Features, module: bool):
        self.ambiguous = ambiguous_names(elf.typed_symbols(STT_FUNC))
        tag = features.decl_tag_kfuncs and features.decl_tag and not module
        self.kfuncs: Kfuncs = find_kfuncs(elf) if tag else {}


class Inputs:
    """What ld concatenated: the input section, and its blobs and their
    ``.BTF.objbtf`` chunks (read from the file, or made by ``rehash.py``),
    in merge order."""

    def __init__(self, section: Section, blobs: list[Blob], sidecars: list[Sidecar],
                 typeless: int = 0):
        self.section = section
        self.typeless = typeless      # objects that went through objbtf without types
        self.blobs = canonical_order(blobs, sidecars)
        self.sidecars = [sidecars[b.index] for b in self.blobs]


def read_inputs(elf: ElfFile, path: str, section: str, progress: Progress,
                objects: ObjectList | None = None, jobs: int = 1,
                merge: bool = True) -> Inputs:
    """The blobs of ``section`` and their chunks, checked against each other
    and against ``objects``; chunks the file lacks are made by ``jobs``
    processes.  ``merge=False`` gives chunks that merge no type."""
    sec = elf.section_by_name(section)
    if sec is None or sec.size == 0:
        raise LinkError(f'{path}: no {section} section: were the objects encoded '
                        '(objbtf encode) and linked with their .BTF?')
    chunks = _chunks(elf, path, objects, progress) if merge else None
    if chunks is None:
        blobs = split_blobs(elf.section_view(sec))
        if merge:
            progress.step(f'hash the types of {len(blobs)} blobs')
        made = _make_chunks(hashed_chunk if merge else unmerged_chunk, blobs, jobs)
        inputs = Inputs(sec, blobs, made)
    else:
        sidecars = [c for c in chunks if c.has_btf]
        blobs = split_blobs(elf.section_view(sec), [c.name for c in sidecars])
        _check_pairs(path, blobs, sidecars)
        inputs = Inputs(sec, blobs, sidecars, len(chunks) - len(sidecars))
    elf.release(sec)
    return inputs


def _make_chunks(make: Callable[[Blob], Sidecar], blobs: list[Blob], jobs: int) -> list[Sidecar]:
    """``make(blob)`` for every blob, in ``jobs`` processes."""
    def shard(r: range) -> list[Sidecar]:
        return [_blob_error(make, blobs[i]) for i in r]
    results = run_sharded(shard, [len(b.data) for b in blobs], jobs)
    return [c for part in results for c in part]


def _blob_error(make: Callable[[Blob], Sidecar], blob: Blob) -> Sidecar:
    try:
        return make(blob)
    except BtfError as err:
        raise LinkError(f'{blob.label}: {err}') from None


class Prepared:
    """The table dedup turns into the final BTF, and where the entries of
    its DATASECs (one per output section, after the objects' types) were read."""

    def __init__(self, btf: Btf, layout: list[list[Field]]):
        self.btf = btf
        self.layout = layout


def prepare(elf: ElfFile, inputs: Inputs, base: Btf | None, features: Features,
            symbols: FromSymbols, progress: Progress, summary: Summary,
            jobs: int = 1) -> Prepared:
    """The passes before dedup."""
    progress.step('concatenate')
    sec = inputs.section
    table = merge_blobs(inputs.blobs, inputs.sidecars, base, elf.byteorder,
                        lambda b: elf.release(sec, b.offset, b.offset + len(b.data)), jobs)
    btf = table.btf
    summary.objects = len(inputs.blobs)
    summary.types_in = table.types_in
    summary.merged = len(btf)
    progress.step('relocate')
    fields = entry_fields(btf, table.origin)
    placed = place_variables(elf, btf, sec, fields, inputs.blobs)
    elf.release(sec)
    graves = Tombstones(btf)
    progress.step('datasec')
    layout = rebuild_datasecs(btf, placed, fields, graves)
    summary.variables = sum(map(len, layout))
    progress.step('functions')
    summary.functions = check_functions(btf, symbols.ambiguous, graves, features.consistent_func)
    progress.step('kfuncs')
    summary.kfuncs = tag_kfuncs(btf, symbols.kfuncs)
    return Prepared(btf, layout)


def unmerged_table(elf: ElfFile, path: str, features: Features) -> Btf:
    """The passes before dedup on every type as it is, without merging by
    hash: what libbpf's dedup would be given (the tests compare the two)."""
    inputs = read_inputs(elf, path, '.BTF', Progress(False), merge=False)
    symbols = FromSymbols(elf, features, module=False)
    return prepare(elf, inputs, None, features, symbols, Progress(False), Summary()).btf


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
        progress.warn(f'{path}: no {SIDECAR} section: the link hashes its objects\' '
                      'types itself, in -j processes (slower than reading the hashes)')
        return None
    if sec.size == 0:
        raise LinkError(f'{path}: {SIDECAR} is empty: its BTF was linked already (the link '
                        'empties it); link it again from its objects')
    chunks = split_sidecars(elf.section_view(sec), elf.byteorder)
    elf.release(sec)
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

