"""Pass 4, datasec: one DATASEC per output section, from the per-object ones.

Per-object DATASECs are named after input sections (``.data..percpu..
shared_aligned``); the link knows which output section each variable
landed in, so their entries are regrouped by output section, sorted by
offset, and the DATASEC sized from the output section.
"""
from __future__ import annotations

from collections.abc import Sequence

from objbtf.btf.kinds import Kind
from objbtf.btf.types import Btf, BtfType, VarSecinfo

from .concat import datasecs
from .relocate import Field, Fields, Placements
from .tombstone import Tombstones


def rebuild_datasecs(btf: Btf, placed: Placements, fields: Fields,
                     graves: Tombstones) -> list[list[Field]]:
    """Replace the per-object DATASECs by one per output section, appended
    at the end of ``btf`` in name order; returns, for each, where its
    entries' offsets were read (the link cache replays them)."""
    entries: dict[str, list[tuple[int, int, int, Field]]] = {}
    sizes: dict[str, int] = {}
    for ds_id, ds in datasecs(btf):
        for j, v in enumerate(ds.items):
            sec, offset = placed[ds_id, j]
            entries.setdefault(sec.name, []).append((offset, v.type, v.size, fields[ds_id, j]))
            sizes[sec.name] = sec.size
        graves.bury(ds_id)
    layout = []
    for name in sorted(entries):
        rows = sorted(entries[name])
        btf.add(BtfType(Kind.DATASEC, name, size=sizes[name],
                        items=tuple(VarSecinfo(t, off, size) for off, t, size, _ in rows)))
        layout.append([field for *_, field in rows])
    return layout


def misplaced(entries: Sequence[tuple[int, int]], size: int) -> tuple[int, bool] | None:
    """The first of a DATASEC's ``entries`` (offset, size), sorted by
    offset, that overlaps the one before it (True) or does not lie within
    the section's ``size`` (False), or None: the kernel accepts neither,
    and ld gives neither."""
    end = 0
    for j, (offset, length) in enumerate(entries):
        if offset < 0 or offset + length > size:
            return j, False
        if offset < end:
            return j, True
        end = offset + length
    return None
