"""Errors of the BTF format layer."""


class BtfError(Exception):
    """BTF bytes that cannot be read, or a type table that breaks a rule."""
