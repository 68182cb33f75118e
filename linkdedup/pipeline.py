"""``objbtf link``: the passes over one ``LinkState``, in order, with progress and a summary.

``LINK`` lists the passes; ``linkdedup/__init__.py`` explains the order.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import partial

from objbtf.btf.chunk import SECTION as CHUNK_SECTION
from objbtf.btf.chunk import FROM_COMPILER_BTF, Chunk, split_chunks
from objbtf.btf.dedup import dedup
from objbtf.btf.errors import BtfError
from objbtf.btf.hashing import past_the_last
from objbtf.btf.kinds import BTF_HEADER_LEN, Kind
from objbtf.btf.types import Btf, BtfType, gc_paused
from objbtf.btf.validate import first_problem, first_problem_among
from objbtf.btf.writer import encode_btf, with_kind_layout
from objbtf.elf.consts import ET_REL
from objbtf.elf.errors import ElfError
from objbtf.elf.reader import ElfFile, Section
from objbtf.elf.writer import write_atomically
from objbtf.errors import ObjbtfError, shown
from objbtf.features import Features
from objbtf.regular_files import file_identity
from objbtf.btf.function_rules import FACT_WEAK

from . import cache as link_cache
from . import stamp
from .base_index import BaseIndex, open_index
from .concat import Blob, canonical_order, split_blobs
from .datasec import misplaced, rebuild_datasecs
from .distill import DistillError, distill
from .emit import emit
from .functions import STT_FUNC, FunctionReport, ambiguous_names, check_functions, merged_facts
from .kfuncs import BtfIds, KfuncReport, Kfuncs, find_kfuncs, kernel_marks_sets, tag_kfuncs
from .merge import MergedTable, merge_blobs
from .objects import ObjectList, ObjectsError, refuse_foreign
from .premap import split_dedup
from .rehash import hashed_chunk, unmerged_chunk
from .relocate import Field, Fields, Placements, entry_fields, place_variables
from .settings import LinkSettings
from .split_vars import split_variables
from .tombstone import Tombstones
from .workers import Background, default_jobs, run_sharded

#: The input section's size from which the link checks the checksums and
#: reads the symbols in a process of its own while it merges the types
#: (``Beside``): vmlinux's, never a module's, whose link is over before a
#: fork would pay for itself.
_BESIDE_FROM = 16 << 20


class LinkError(ObjbtfError):
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
        self.premapped: int | None = None
        self.distilled: int | None = None      # types in the distilled base
        #: vmlinux's objects encoded from GCC's BTF, and the (LOST_*, enum
        #: name) their chunks counted (``dwarfless_note``).
        self.from_compiler = 0
        self.losses: set[tuple[int, str]] = set()

    def cacheable(self) -> dict:
        """What a replay of this link reports again."""
        f = self.functions or FunctionReport()
        return {'objects': self.objects, 'types_in': self.types_in, 'merged': self.merged,
                'types_out': self.types_out, 'variables': self.variables,
                'functions': f.as_dict(),
                'kfuncs_tagged': self.kfuncs.tagged, 'kfuncs_missing': self.kfuncs.missing}

    def restore(self, cached: dict) -> None:
        for name in ('objects', 'types_in', 'merged', 'types_out', 'variables'):
            setattr(self, name, cached[name])
        self.functions = FunctionReport.from_dict(cached['functions'])
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
        if self.distilled is not None:
            out.append(f'  distilled base: {self.distilled} types in .BTF.base')
        if self.premapped is not None:
            out.append(f'  base index: {self.premapped} of {self.merged} types found '
                       'in the base by hash')
        if f is not None and f.dropped:
            out.append(f'  functions dropped: {len(f.inconsistent)} with prototypes that '
                       f'differ between objects, {len(f.ambiguous)} at several addresses, '
                       f'{len(f.unexpected_reg)} with parameters in unexpected registers, '
                       f'{len(f.uncertain_loc)} with packed structs on the stack, '
                       f'{len(f.reordered)} with parameters reordered, '
                       f'{len(f.optimized_clone)} clones with parameters optimized out')
        k = self.kfuncs
        if k.tagged or k.missing:
            out.append(f'  kfuncs: {len(k.tagged) + len(k.missing)} in .BTF_ids, '
                       f'{len(k.tagged)} tagged bpf_kfunc, {len(k.missing)} without a FUNC')
        return out

    def dwarfless_note(self) -> list[str]:
        """What a DWARF-less vmlinux's BTF lacks, said even under -q
        (Kbuild's quiet output): a kernel made with GCC 12's -gbtf has less
        BTF than its DWARF build, and nothing else says so.  Nothing for a
        link of objects encoded from DWARF, or a module's."""
        if not self.from_compiler:
            return []
        enums = len({name for _, name in self.losses})
        counted = f'{enums} enums here lost some or all' if enums else 'none counted here'
        return [f'objbtf link: note: the BTF of {self.from_compiler} of {self.objects} objects '
                f'came from GCC\'s -gbtf, not DWARF, and lacks what GCC 12\'s lacks: '
                f'enumerators outside 32 bits ({counted}), types declared in functions, '
                'parameter locations',
                'objbtf link: note: objbtf\'s docs/dwarfless.md says more ("What GCC 12\'s BTF '
                'lacks"); objbtf check OBJECT.o names the enums an object lost']


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


class LinkState:
    """What the passes share: the link's options, the file, and what each
    pass leaves for the next.  Each pass reads the fields the passes before
    it set (see the order at the top of ``linkdedup/__init__.py``): those
    declared below without a value exist once the pass named beside them
    has run."""

    elf: ElfFile                    # _linked (or whoever runs the passes)
    inputs: Inputs                  # read_pass
    beside: Background[Beside]      # read_pass
    table: MergedTable              # merge_pass (vmlinux: until dedup_pass)
    graves: Tombstones              # relocate_pass (vmlinux: until dedup_pass)
    final: Btf                      # dedup_pass

    def __init__(self, settings: LinkSettings, *, objects: ObjectList | None = None,
                 jobs: int = 1, progress: Progress | None = None, merge: bool = True):
        self.settings = settings
        self.objects = objects
        self.jobs = jobs
        self.progress = progress or Progress(False)
        self.merge = merge            # False: every type as it is (no merging by hash)
        self.summary = Summary()
        self.base: Btf | None = None
        self.index: BaseIndex | None = None
        self.merged: list[BtfType] = []     # the table's types as merging made them
        self.fields: Fields = {}
        self.placed: Placements = {}
        self.layout: list[list[Field]] = []
        self.raw: bytes | None = None       # encode_pass, or replay_pass from the cache
        self.may_replay = False             # read_pass: --cache names a file that holds a link
        self.distilled: bytes | None = None  # distill_pass: the module's .BTF.base

    @property
    def raw_bytes(self) -> bytes:
        """The final BTF's bytes, for the passes that follow them (``FINISH``)."""
        if self.raw is None:
            raise LinkError(f'{self.settings.file}: the link wrote nothing (a pass out of order)')
        return self.raw

    @property
    def btf(self) -> Btf:
        """The table the passes before dedup work on."""
        return self.table.btf

    @property
    def symbols(self) -> FromSymbols:
        """What the passes take from symbols, once ``beside`` has it."""
        return self.beside.result().symbols


def link(settings: LinkSettings) -> Summary:
    """Turn the per-object BTF in ``settings.file`` into its final BTF; with
    ``split_vars``, the non-percpu variables go there, as split BTF; with
    ``cache``, a link whose objects' types are those of the last one
    replays it (``cache.py``); with ``objects_path``, every object it lists
    must have BTF in the file; ``jobs`` processes share the work over the
    objects (``workers.py``), with the same output for any number; with
    ``base_index``, a module link keeps an index of the base's BTF there
    (``base_index.py``) and dedups through it (``premap.py``), to the same
    output; with ``types_stamp``, that file changes only when the types
    modules depend on do (``stamp.py``).  Progress goes to stderr when it
    is a terminal, unless ``quiet``."""
    objects = (ObjectList(settings.objects_path, settings.allow_missing)
               if settings.objects_path else None)
    state = LinkState(settings, objects=objects, jobs=settings.jobs or default_jobs(),
                      progress=Progress(sys.stderr.isatty() and not settings.quiet))
    started = time.monotonic()
    path, base_path = settings.file, settings.base_path
    if settings.cache is not None and (base_path or settings.split_vars):
        raise LinkError(f'{path}: --cache is for vmlinux, without --base or --split-vars')
    if settings.types_stamp is not None and base_path:
        raise LinkError(f'{path}: --types-stamp is for vmlinux, without --base')
    if settings.base_index is not None and not base_path:
        raise LinkError(f'{path}: --base-index is for a module link, with --base')
    # The link builds tens of thousands of objects and no cycles: the
    # collector, paused, would only walk them; the state goes before it
    # resumes, or its first collection walks all that is still alive.
    with gc_paused():
        summary = _linked(state)
        del state
    summary.seconds = time.monotonic() - started
    return summary


def _linked(state: LinkState) -> Summary:
    """``link``'s work on ``state``."""
    if state.settings.base_path:
        state.base, state.index = _load_base(state.settings.base_path, state.settings.base_index,
                                             state.progress)
    with ElfFile.open(state.settings.file) as elf:
        state.elf = elf
        run_passes(state, LINK)
    state.progress.done()
    return state.summary


def run_passes(state: LinkState, passes: tuple) -> None:
    """Each pass in turn; once a pass has the final bytes (the cache
    replayed the link), only ``FINISH`` follows.  A pass that fails while
    ``beside`` works gives way to what it found, which a link in one
    process would have found first."""
    try:
        for each in passes:
            if state.raw is None or each in FINISH:
                each(state)
    except Exception:
        if hasattr(state, 'beside'):
            state.beside.result()
        raise
    finally:
        if hasattr(state, 'beside'):
            state.beside.abandon()


def read_pass(state: LinkState) -> None:
    """Pass 1: the blobs of the section and their chunks (``concat``,
    ``objects``, ``rehash``), and what the later passes take from symbols."""
    state.inputs = read_inputs(state.elf, state.settings.file, state.settings.input_section,
                               state.progress, state.objects, state.jobs, state.merge)
    state.summary.typeless = state.inputs.typeless
    if state.settings.base_path is None:
        _count_compiler_btf(state.summary, state.inputs.chunks)
    settings, inputs = state.settings, state.inputs
    state.may_replay = settings.cache is not None and link_cache.holds_a_link(settings.cache)
    alone = state.jobs > 1 and inputs.section.size >= _BESIDE_FROM
    # A link the cache may replay waits for the key at once: meanwhile,
    # the checksums are checked here (and, failing, say so first).
    here = alone and state.may_replay
    beside = Background(partial(Beside, state.elf, settings, inputs, checksums=not here),
                        fork=alone)
    if here:
        try:
            inputs.check_checksums(state.elf, settings.file)
        except LinkError:
            beside.abandon()
            raise
    state.beside = beside


def _count_compiler_btf(summary: Summary, chunks: list[Chunk]) -> None:
    """The objects encoded from their compiler's BTF, and what their
    chunks say it lost, for the summary's ``dwarfless_note``."""
    for chunk in chunks:
        if chunk.source == FROM_COMPILER_BTF:
            summary.from_compiler += 1
            summary.losses.update(chunk.losses)


def replay_pass(state: LinkState) -> None:
    """With ``--cache``: the final BTF of the last link, if its objects'
    types were these (``cache``).  Only a file that holds a link waits
    for the key (``beside``)."""
    if not state.may_replay:
        return
    key = state.beside.result().cache_key
    assert key is not None
    cached = link_cache.load(state.settings.cache, key)
    if cached is None:
        return
    state.raw = link_cache.replay(cached, state.elf, state.inputs.section, state.inputs.blobs)
    if state.raw is not None:
        state.summary.restore(cached.summary)


def merge_pass(state: LinkState) -> None:
    """Pass 2: every object's types in one table, merged by hash (``merge``)."""
    state.progress.step('concatenate')
    elf, inputs = state.elf, state.inputs
    state.table = merge_blobs(inputs.blobs, inputs.chunks, state.base, elf.byteorder,
                              inputs.releaser(elf), state.jobs)
    btf = state.btf
    state.merged = list(btf.types if btf.base is not None else btf.types[1:])
    state.summary.objects = len(inputs.blobs)
    state.summary.types_in = state.table.types_in
    state.summary.merged = len(btf)


def relocate_pass(state: LinkState) -> None:
    """Pass 3: where each DATASEC entry's variable landed (``relocate``)."""
    state.progress.step('relocate')
    state.fields = entry_fields(state.btf, state.table.origin)
    state.placed = place_variables(state.elf, state.btf, state.inputs.section, state.fields,
                                   state.inputs.blobs)
    state.elf.release(state.inputs.section)
    state.graves = Tombstones(state.btf)


def datasec_pass(state: LinkState) -> None:
    """Pass 4: one DATASEC per output section (``datasec``)."""
    state.progress.step('datasec')
    state.layout = rebuild_datasecs(state.btf, state.placed, state.fields, state.graves)
    _check_datasecs(state)
    state.summary.variables = sum(map(len, state.layout))


def _check_datasecs(state: LinkState) -> None:
    """The DATASECs made from what ld says of the variables (relocations,
    symbols, sections: nothing a checksum covers): variables that collide
    or lie outside their section are named, with their objects.  The
    kernel's other rules on them wait for dedup (``_check_final_datasecs``):
    before it the table may have more types than BTF can number."""
    btf, blobs = state.btf, state.inputs.blobs
    first = btf.next_id - len(state.layout)
    for k, fields in enumerate(state.layout):
        ds = btf[first + k]
        bad = misplaced([(v.offset, v.size) for v in ds.items], ds.size)
        if bad is None:
            continue

        def variable(j: int) -> str:
            v = ds.items[j]
            return (f"variable '{btf[v.type].name}' of {blobs[fields[j][0]].label} "
                    f'at offset {v.offset} ({v.size} bytes)')
        j, overlaps = bad
        clash = (f'overlaps {variable(j - 1)}' if overlaps
                 else f'lies outside the section ({ds.size} bytes)')
        raise LinkError(f'{state.settings.file}: in section {shown(ds.name)}, {variable(j)} '
                        f'{clash}: are the relocations of .BTF or the symbols corrupt?')


def _check_final_datasecs(state: LinkState) -> None:
    """The final DATASECs against the kernel's rules (``_check_datasecs``),
    with their VARs: the kernel resolves types in id order, and checks the
    size of a DATASEC's entry only if its VAR was resolved before.  Dedup
    keeps the DATASECs, in order, near the end: they are looked for from
    there."""
    final = state.final
    datasecs: list[int] = []
    for type_id in range(final.next_id - 1, final.start_id - 1, -1):
        if len(datasecs) == len(state.layout):
            break
        if final[type_id].kind is Kind.DATASEC:
            datasecs.append(type_id)
    problem = first_problem_among(final, datasecs + [v.type for ds in datasecs
                                                    for v in final[ds].items])
    if problem is not None:
        raise LinkError(f'{state.settings.file}: the DATASECs made of the objects\' variables '
                        f'break a rule of the kernel\'s: {shown(str(problem))}')


def functions_pass(state: LinkState) -> None:
    """Pass 5: pahole's rules for FUNCs across objects (``functions``)."""
    state.progress.step('functions')
    btf, table = state.btf, state.table
    weak_in = [c.facts for c in state.inputs.chunks]

    def weak(func_id: int) -> bool:
        blob, _ = table.origin(func_id)
        return bool(weak_in[blob.order].get(btf[func_id].name, 0) & FACT_WEAK)
    state.summary.functions = check_functions(btf, state.symbols.ambiguous, state.graves,
                                              state.settings.features.consistent_func,
                                              merged_facts(state.inputs.chunks), weak)


def kfuncs_pass(state: LinkState) -> None:
    """Pass 6: a ``bpf_kfunc`` tag on every kfunc (``kfuncs``)."""
    state.progress.step('kfuncs')
    state.summary.kfuncs = tag_kfuncs(state.btf, state.symbols.kfuncs,
                                      state.settings.features.attributes)


def dedup_pass(state: LinkState) -> None:
    """Pass 7: libbpf's dedup (``objbtf.btf.dedup``); with a base index,
    through it (``premap``)."""
    state.progress.step(f'dedup {len(state.btf)} types')
    try:
        if state.index is not None:
            hashes, flags = state.table.chunk_entries()
            state.final, state.summary.premapped = split_dedup(
                state.btf, state.merged, hashes, flags, state.index)
        else:
            btf = state.btf
            _let_go_of_the_inputs(state)
            state.final = dedup(btf, consume=True)
            del btf
    except (IndexError, BtfError):
        # A base is read as it is (vmlinux's BTF, checked when linked): only
        # when dedup fails is it checked, to name it if it is to blame.
        problem = _base_problem(state.base) if state.base is not None else None
        if problem is None:
            raise
        raise LinkError(f'{state.settings.base_path}: the base BTF is damaged: {problem}') from None
    _check_final_datasecs(state)
    state.summary.types_out = len(state.final)


def _let_go_of_the_inputs(state: LinkState) -> None:
    """What only the passes before dedup read, let go before vmlinux's
    dedup, which then makes the final types of the table's own, in place
    (``consume``): the objects' chunks (a hash and an offset for each of
    millions of types), the merged table's record of where each type came
    from, and the duplicates dedup drops.  Otherwise all of it would be in
    memory with the final types, the link's peak."""
    state.inputs.chunks = state.inputs.unchecked = []
    state.merged = []
    del state.table, state.graves


def _base_problem(base: Btf) -> str | None:
    """What breaks the kernel's rules in ``base``, or None."""
    dangling = base.dangling()
    if dangling is not None:
        return past_the_last(base, *dangling)
    problem = first_problem(base)
    return str(problem) if problem is not None else None


def distill_pass(state: LinkState) -> None:
    """Pass 8: with ``distilled_base``, a module's split BTF on a distilled
    base of its own, which goes beside it as ``.BTF.base`` (``distill``)."""
    settings = state.settings
    if not settings.features.distilled_base or state.base is None:
        return
    if settings.output is not None:
        raise LinkError(f'{settings.file}: distilled_base writes .BTF.base into the module '
                        f'beside its .BTF: link it in place, without --output')
    if state.elf.e_type != ET_REL:
        raise LinkError(f'{settings.file}: distilled_base is for a module (a relocatable .ko), '
                        f'not for an ELF file of type {state.elf.e_type}')
    from objbtf.btf.reader import parse_btf
    state.progress.step('distill')
    try:
        dist, split = distill(state.final)
    except DistillError as err:
        raise LinkError(f'{settings.file}: {err}') from None
    raw = encode_btf(dist)
    state.final = Btf(split.types, base=parse_btf(raw), byteorder=split.byteorder)
    state.distilled = raw
    state.summary.distilled = len(dist)
    state.summary.types_out = len(split)


def encode_pass(state: LinkState) -> None:
    """Pass 9: the final BTF's bytes; with ``--split-vars`` the variables
    split off (``split_vars``); with ``--cache`` kept for the next link."""
    state.progress.step('emit')
    offsets: list[int] = []
    try:
        raw = encode_btf(state.final, offsets)
    except UnicodeEncodeError as err:
        # As encode: a name read from damaged bytes (here a section's, or a
        # blob's that a re-signed chunk vouched for) cannot be BTF text.
        raise LinkError(f"{state.settings.file}: a name that is not UTF-8: '{shown(err.object)}'") \
            from None
    if state.settings.split_vars is not None:
        if state.base is not None:
            raise LinkError(f'{state.settings.file}: --split-vars is for vmlinux, not for a module')
        raw, split_raw, moved = split_variables(state.final)
        if not moved:
            raise LinkError(f'{state.settings.file}: no variables outside .data..percpu to split '
                            'off: encode the objects with --btf-features default,global_var')
        write_atomically(state.settings.split_vars, [split_raw])
        state.summary.split = f'{moved} variables to {state.settings.split_vars}'
    key = state.beside.result().cache_key
    if key is not None:
        datasecs = link_cache.describe_datasecs(state.final, offsets, state.layout,
                                                BTF_HEADER_LEN)
        if datasecs is not None:
            link_cache.store(state.settings.cache, key,
                             link_cache.CachedLink(raw, datasecs, state.summary.cacheable()))
    state.raw = raw


def layout_pass(state: LinkState) -> None:
    """Pass 10: with ``layout``, the kind layout section (``with_kind_layout``),
    in base BTF only, as pahole adds it."""
    if state.settings.features.layout and state.base is None:
        state.raw = with_kind_layout(state.raw_bytes)


def emit_pass(state: LinkState) -> None:
    """Pass 11: the final BTF written where it was asked for, with the
    distilled base if there is one (``emit``)."""
    state.summary.written = emit(state.raw_bytes, state.elf, state.settings.file,
                                 state.settings.input_section, state.settings.output,
                                 state.distilled)


def stamp_pass(state: LinkState) -> None:
    """Pass 12: with ``--types-stamp``, that file rewritten if the types
    modules depend on changed (``stamp``)."""
    if state.settings.types_stamp is not None:
        stamp.stamp_types(state.settings.types_stamp, state.raw_bytes,
                          state.symbols.marks_sets)


#: The passes before dedup: what libbpf's dedup would be given.
PREPARE = (merge_pass, relocate_pass, datasec_pass, functions_pass, kfuncs_pass)
#: The passes that follow the final bytes, however they were made.
FINISH = (layout_pass, emit_pass, stamp_pass)
#: A link, in order (``linkdedup/__init__.py`` says why this order).
LINK = (read_pass, replay_pass, *PREPARE, dedup_pass, distill_pass, encode_pass, *FINISH)


class FromSymbols:
    """What the passes take from the linked file's symbols: the function
    names at several addresses (functions pass); with ``decl_tag_kfuncs``
    and ``decl_tag`` (pahole needs both), the kfuncs of ``.BTF_ids``
    (kfuncs pass), for which a module (``base_path``) may ask vmlinux
    whether its kernel marks kfunc sets (kfuncs.py); and with ``marks``
    (``--types-stamp``) whether this file marks them, None if it cannot
    say.  ``.BTF_ids`` is read only for those."""

    def __init__(self, elf: ElfFile, features: Features, base_path: str | None = None,
                 marks: bool = False):
        self.ambiguous = ambiguous_names(elf.typed_symbols(STT_FUNC))
        tag = features.decl_tag_kfuncs and features.decl_tag
        try:
            ids = BtfIds.read(elf) if tag or marks else None
        except ElfError:
            if tag:
                raise
            ids = None
        base_marks = (lambda: kernel_marks_sets(base_path)) if base_path else None
        self.kfuncs: Kfuncs = find_kfuncs(ids, base_marks) if tag else {}
        self.marks_sets = None if ids is None else ids.marks_sets()


class Beside:
    """What the link learns from the file beside the objects' types: that
    every chunk read from it is the one its object's encoder wrote (the
    checksums), what the passes take from its symbols, and, with
    ``--cache``, the link's key.  None of it waits for the types, nor they
    for it until the functions pass: for vmlinux, a process of its own
    does it while this one merges the types (``read_pass``)."""

    def __init__(self, elf: ElfFile, settings: LinkSettings, inputs: Inputs,
                 checksums: bool = True):
        if checksums:
            inputs.check_checksums(elf, settings.file)
        self.symbols = FromSymbols(elf, settings.features, settings.base_path,
                                   marks=settings.types_stamp is not None)
        self.cache_key = None if settings.cache is None else link_cache.cache_key(
            inputs.chunks, self.symbols.ambiguous, self.symbols.kfuncs,
            settings.features.names(), settings.input_section)


class Inputs:
    """What ld concatenated: the input section, and its blobs and their
    ``.BTF.objbtf`` chunks (read from the file, or made by ``rehash.py``),
    in merge order; and, in link order, the chunks read from the file
    (those without types too) with the blobs of those with types, whose
    checksums ``Beside`` checks."""

    def __init__(self, section: Section, blobs: list[Blob], chunks: list[Chunk],
                 typeless: int = 0, unchecked: list[Chunk] | None = None):
        self.section = section
        self.typeless = typeless      # objects that went through objbtf without types
        self.linked_blobs = blobs
        self.unchecked = unchecked or []
        self.blobs = canonical_order(blobs, chunks)
        self.chunks = [chunks[b.index] for b in self.blobs]

    def releaser(self, elf: ElfFile) -> Callable[[Blob], None]:
        """What hands a blob's pages back, once a pass is done with it."""
        return lambda b: elf.release(self.section, b.offset, b.offset + len(b.data))

    def check_checksums(self, elf: ElfFile, path: str) -> None:
        """``_check_checksums`` of the chunks read from ``path``, open as ``elf``."""
        if self.unchecked:
            _check_checksums(path, self.unchecked, self.linked_blobs, self.releaser(elf))


def read_inputs(elf: ElfFile, path: str, section: str, progress: Progress,
                objects: ObjectList | None = None, jobs: int = 1,
                merge: bool = True) -> Inputs:
    """The blobs of ``section`` and their chunks, checked against each other
    and against ``objects`` (their checksums: ``Beside``); chunks the file
    lacks are made by ``jobs`` processes.  ``merge=False`` gives chunks
    that merge no type."""
    sec = elf.section_by_name(section)
    if sec is None or sec.size == 0:
        raise LinkError(f'{path}: no {section} section: were the objects encoded '
                        '(objbtf encode) and linked with their .BTF?')
    found = _chunks(elf, path, objects, progress) if merge else None
    if found is None:
        blobs = split_blobs(elf.section_view(sec))
        own = None if merge else _own_chunks(elf, blobs)
        if merge:
            progress.step(f'hash the types of {len(blobs)} blobs')
        # Blobs that no checksum vouches for get the kernel's rules there.
        check = own is None or not all(c.describes(b.data) for c, b in zip(own, blobs))
        made = _make_chunks(partial(hashed_chunk if merge else unmerged_chunk, check=check),
                            blobs, jobs, path)
        for chunk, theirs in zip(made, own or ()):
            chunk.facts, chunk.raw_facts = theirs.facts, theirs.raw_facts
        inputs = Inputs(sec, blobs, made)
    else:
        chunks = [c for c in found if c.has_btf]
        blobs = split_blobs(elf.section_view(sec), [c.label for c in chunks])
        _check_pairs(path, blobs, chunks)
        inputs = Inputs(sec, blobs, chunks, len(found) - len(chunks), unchecked=found)
    elf.release(sec)
    return inputs


def _own_chunks(elf: ElfFile, blobs: list[Blob]) -> list[Chunk] | None:
    """The file's own chunks of ``blobs`` (one each, in link order), for
    their function facts; None if it has none, or not one each."""
    sec = elf.section_by_name(CHUNK_SECTION)
    if sec is None or sec.size == 0:
        return None
    own = [c for c in split_chunks(elf.section_view(sec), elf.byteorder) if c.has_btf]
    elf.release(sec)
    return own if len(own) == len(blobs) else None


def _make_chunks(make: Callable[[Blob], Chunk], blobs: list[Blob], jobs: int,
                 path: str) -> list[Chunk]:
    """``make(blob)`` for every blob of ``path``, in ``jobs`` processes."""
    def shard(r: range) -> list[Chunk]:
        return [_blob_error(make, blobs[i], path) for i in r]
    results = run_sharded(shard, [len(b.data) for b in blobs], jobs)
    return [c for part in results for c in part]


def _blob_error(make: Callable[[Blob], Chunk], blob: Blob, path: str) -> Chunk:
    try:
        return make(blob)
    except BtfError as err:
        raise LinkError(f'{path}: {blob.label}: {err}') from None


def unmerged_table(elf: ElfFile, path: str, features: Features) -> Btf:
    """The passes before dedup on every type as it is, without merging by
    hash: what libbpf's dedup would be given (the tests compare the two)."""
    state = LinkState(LinkSettings(path, features), merge=False)
    state.elf = elf
    run_passes(state, (read_pass, *PREPARE))
    return state.btf


def _chunks(elf: ElfFile, path: str, objects: ObjectList | None,
            progress: Progress) -> list[Chunk] | None:
    """Every object's .BTF.objbtf chunk, all of this objbtf's format and
    hashing, and naming every object of ``objects``; None (and a slower
    link) when the file has none."""
    sec = elf.section_by_name(CHUNK_SECTION)
    if sec is None:
        if objects is not None:
            raise LinkError(f'{path}: no {CHUNK_SECTION} section, which names the objects: '
                            f'cannot check them against {objects.path}')
        progress.warn(f'{path}: no {CHUNK_SECTION} section: the link hashes its objects\' '
                      'types itself, in -j processes (slower than reading the hashes), '
                      'and keeps the functions that only DWARF facts would drop')
        return None
    if sec.size == 0:
        raise LinkError(f'{path}: {CHUNK_SECTION} is empty: its BTF was linked already '
                        '(the link empties it); link it again from its objects')
    chunks = split_chunks(elf.section_view(sec), elf.byteorder)
    elf.release(sec)
    try:
        refuse_foreign(chunks)
        warning = objects.check(chunks) if objects is not None else None
    except ObjectsError as err:
        raise LinkError(f'{path}: {err}') from None
    if warning:
        progress.warn(f'{path}: {warning}')
    return chunks


def _check_pairs(path: str, blobs: list[Blob], chunks: list[Chunk]) -> None:
    """Chunk i (of those with types) describes blob i: ld put both in link order."""
    for blob, chunk in zip(blobs, chunks):
        if chunk.btf_size != len(blob.data):
            raise LinkError(f'{path}: {CHUNK_SECTION} does not describe the .BTF blobs: '
                            f'the chunk of {chunk.label} is for {chunk.btf_size} bytes of BTF, '
                            f'{blob.label} has {len(blob.data)}: was some object given .BTF '
                            'by another tool?')
    if len(chunks) != len(blobs):
        raise LinkError(f'{path}: {CHUNK_SECTION} does not describe the .BTF blobs '
                        f'({len(chunks)} chunks with types for {len(blobs)} blobs): '
                        'was some object given .BTF by another tool?')


def _check_checksums(path: str, chunks: list[Chunk], blobs: list[Blob],
                     release: Callable[[Blob], None]) -> None:
    """Every chunk is the one the encoder wrote for its blob (``chunks``
    in link order, the typeless too; ``blobs`` those of the chunks with
    types): the link merges by the chunks' hashes, which must not lie.
    Each blob is ``release``d once checked: checking reads every byte of
    the input section, which would otherwise all be in memory at once, the
    link's peak (a distribution's vmlinux has hundreds of megabytes)."""
    blob_of = iter(blobs)
    for chunk in chunks:
        blob = next(blob_of) if chunk.has_btf else None
        if not chunk.describes(b'' if blob is None else blob.data):
            raise LinkError(f'{path}: the {CHUNK_SECTION} chunk of {chunk.label} (at offset '
                            f'{chunk.position}) does not match its checksum: the object '
                            'changed after objbtf encode wrote it; encode it again')
        if blob is not None:
            release(blob)


#: The indexed base of this process's last module link, by the base file's
#: identity and the index's path: a resident worker links module after
#: module against one vmlinux, and need not read it, check its index's key
#: and parse its types again each time.
_last_base: tuple[tuple, BaseIndex] | None = None


def _load_base(path: str, index_path: str | None,
               progress: Progress) -> tuple[Btf, BaseIndex | None]:
    """The base BTF in ``path``, and its index kept in ``index_path`` (made
    there if missing or stale; None if not asked for, if it cannot be
    written there, or if this base cannot have one)."""
    global _last_base
    from objbtf.btf.reader import parse_btf
    from objbtf.btf_file import read_btf_bytes
    try:
        st = os.stat(path)
        identity = (*file_identity(st), st.st_ctime_ns, index_path)
        if _last_base is not None and _last_base[0] == identity:
            return _last_base[1].base, _last_base[1]
        raw = read_btf_bytes(path)
        index = None
        if index_path is not None:
            try:
                index = open_index(index_path, raw)
            except OSError as err:
                progress.warn(f'{index_path}: cannot keep the base index there '
                              f'({err.strerror}): linking without it')
        if index is None:
            return parse_btf(raw), None
        # Checked against these bytes (its key): right for this base, if
        # the file was replaced since the stat above or not.
        _last_base = identity, index
        return index.base, index
    except (OSError, BtfError, ElfError) as err:
        raise LinkError(f'{path}: cannot read the base BTF: {err}') from None

