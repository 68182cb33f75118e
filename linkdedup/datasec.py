"""Pass 3, datasec: one DATASEC per output section, from the per-object ones.

Per-object DATASECs are named after input sections (``.data..percpu..
shared_aligned``); the link knows which output section each variable
landed in, so their entries are regrouped by output section, sorted by
offset, and the DATASEC sized from the output section.
"""
from __future__ import annotations

from objbtf.btf.kinds import Kind
from objbtf.btf.types import Btf, BtfType, VarSecinfo

from .concat import datasecs
from .relocate import Placements
from .tombstone import Tombstones


def rebuild_datasecs(btf: Btf, placed: Placements, graves: Tombstones) -> int:
    """Replace the per-object DATASECs by one per output section, appended
    at the end of ``btf``; returns how many variables they hold."""
    entries: dict[str, list[tuple[int, int, int]]] = {}
    sizes: dict[str, int] = {}
    for ds_id, ds in datasecs(btf):
        for j, v in enumerate(ds.items):
            sec, offset = placed[ds_id, j]
            entries.setdefault(sec.name, []).append((offset, v.type, v.size))
            sizes[sec.name] = sec.size
        graves.bury(ds_id)
    count = 0
    for name in sorted(entries):
        rows = sorted(entries[name])
        btf.add(BtfType(Kind.DATASEC, name, size=sizes[name],
                        items=tuple(VarSecinfo(t, off, size) for off, t, size in rows)))
        count += len(rows)
    return count
