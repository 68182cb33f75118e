"""Errors of the BTF format layer."""
from ..errors import ObjbtfError


class BtfError(ObjbtfError):
    """BTF bytes that cannot be read, or a type table that breaks a rule."""
