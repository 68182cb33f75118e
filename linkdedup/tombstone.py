"""Removing types from the concatenated table before dedup, without renumbering.

Renumbering a million types costs seconds.  Instead, a type to remove is
overwritten with a copy of a type the table holds anyway (its first INT):
dedup merges the copy into that type and nothing of it is left.
"""
from __future__ import annotations

from objbtf.btf.kinds import INT_SIGNED, Kind
from objbtf.btf.types import Btf, BtfType


class Tombstones:
    def __init__(self, btf: Btf):
        self.btf = btf
        self._stone: BtfType | None = None
        self.buried = 0

    def bury(self, type_id: int) -> None:
        """Make ``type_id`` disappear in the coming dedup."""
        if self._stone is None:
            self._stone = self._template()
        index = type_id if self.btf.base is None else type_id - self.btf.start_id
        self.btf.types[index] = self._stone.copy()
        self.buried += 1

    def _template(self) -> BtfType:
        for _, t in self.btf.own():
            if t.kind is Kind.INT:
                return t.copy()
        # A table without any INT: give the tombstones one to merge into.
        stone = BtfType(Kind.INT, 'int', size=4, encoding=INT_SIGNED, bits=32)
        self.btf.add(stone.copy())
        return stone
