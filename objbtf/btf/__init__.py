"""The BTF format: types, string table, reading, writing and validation."""
from .errors import BtfError
from .kinds import Kind
from .reader import parse_btf
from .types import Btf, BtfType, Enumerator, Member, Param, VarSecinfo
from .writer import encode_btf

__all__ = ['Btf', 'BtfError', 'BtfType', 'Enumerator', 'Kind', 'Member',
           'Param', 'VarSecinfo', 'encode_btf', 'parse_btf']
