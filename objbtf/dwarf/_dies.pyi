"""objbtf.dwarf._dies (_dies.c): reader.read_units in C."""
from typing import Any

def init(die: type, unit: type, expr: type, type_tags: frozenset[int],
         child_tags: frozenset[int], top_tags: frozenset[int], wanted: frozenset[int],
         forms_of: dict[int, tuple[str, str, set[int]]], annotation_tag: int,
         item_attrs: dict[int, tuple[int, ...]], item_parents: frozenset[int], /) -> None: ...

class Arena:
    """The type DIEs of one object, kept in C (_arena.h)."""
    def die(self, offset: Any, /) -> Any: ...
    def dies(self, first: int, end: int, /) -> list[Any]: ...

def read_units(info: bytes, abbrev: bytes, str: bytes, line_str: bytes, str_offsets: bytes,
               loclists: bytes, big_endian: bool, /) -> list[Any] | None: ...
