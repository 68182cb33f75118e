"""BTF kind numbers and the encoding constants of the kernel's uapi/linux/btf.h."""
from enum import IntEnum

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1
BTF_HEADER_LEN = 24
MAX_NAME_LEN = 128
MAX_RESOLVE_DEPTH = 32


class Kind(IntEnum):
    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


#: Each kind as a module-level name: ``Kind.X`` costs a descriptor call each
#: time in CPython 3.11, and the reader, the writer and dedup compare kinds
#: in their hot loops (they import these as ``_X``).
(UNKN, INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT,
 FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64) = Kind

# INT encoding bits (BTF_INT_ENCODING).
INT_SIGNED = 1 << 0
INT_CHAR = 1 << 1
INT_BOOL = 1 << 2

# VAR linkage.
VAR_STATIC = 0
VAR_GLOBAL_ALLOCATED = 1
VAR_GLOBAL_EXTERN = 2

# FUNC linkage (stored in vlen).
FUNC_STATIC = 0
FUNC_GLOBAL = 1
FUNC_EXTERN = 2

#: Kinds whose header word holds a size rather than a type id.
SIZED_KINDS = frozenset({Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM,
                         Kind.DATASEC, Kind.FLOAT, Kind.ENUM64})
#: Kinds that only refer to one other type (header word is a type id).
REF_KINDS = frozenset({Kind.PTR, Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST,
                       Kind.RESTRICT, Kind.FUNC, Kind.VAR, Kind.TYPE_TAG,
                       Kind.DECL_TAG})
#: Modifiers that are transparent for size and resolution.
MODIFIER_KINDS = frozenset({Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST,
                            Kind.RESTRICT, Kind.TYPE_TAG})

#: Kinds that refer to no other type.
LEAF_KINDS = frozenset({Kind.INT, Kind.FLOAT, Kind.FWD, Kind.ENUM, Kind.ENUM64})
KIND_NAMES = {k: k.name for k in Kind}


def extra_len(kind: Kind, vlen: int) -> int:
    """Bytes that follow a type's 12-byte common header."""
    if kind in (Kind.INT, Kind.VAR, Kind.DECL_TAG):
        return 4
    if kind is Kind.ARRAY:
        return 12
    if kind in (Kind.STRUCT, Kind.UNION, Kind.DATASEC, Kind.ENUM64):
        return 12 * vlen
    if kind in (Kind.ENUM, Kind.FUNC_PROTO):
        return 8 * vlen
    return 0
