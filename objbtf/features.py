"""Encoding features, named like pahole's ``--btf_features``."""
from __future__ import annotations

#: pahole's default set (``--btf_features=default``).
DEFAULT = ('encode_force', 'var', 'float', 'decl_tag', 'type_tag', 'enum64',
           'optimized_func', 'consistent_func', 'decl_tag_kfuncs')
#: Features pahole knows but leaves off by default (Linux 7.x asks for
#: ``attributes`` and ``layout``: the kernels before it refuse ``layout``;
#: 6.12 asks for ``distilled_base`` for out-of-tree modules, whose link then
#: writes ``.BTF.base``: linkdedup/distill.py).
OPTIONAL = ('global_var', 'reproducible_build', 'distilled_base', 'attributes', 'layout')


class Features:
    """Which BTF features to encode; each one is a boolean attribute."""
    NAMES = DEFAULT + OPTIONAL
    __slots__ = NAMES
    # The slots, spelled out for type checkers (and mypyc: docs/contributing.md).
    encode_force: bool
    var: bool
    float: bool
    decl_tag: bool
    type_tag: bool
    enum64: bool
    optimized_func: bool
    consistent_func: bool
    decl_tag_kfuncs: bool
    global_var: bool
    reproducible_build: bool
    distilled_base: bool
    attributes: bool
    layout: bool

    def __init__(self, **on: bool):
        unknown = set(on) - set(self.NAMES)
        if unknown:
            raise TypeError(f'unknown features {sorted(unknown)}')
        for name in self.NAMES:
            setattr(self, name, on.get(name, name in DEFAULT))

    @classmethod
    def parse(cls, spec: str | None) -> Features:
        """Parse a comma list like pahole's: names, ``default``, ``all``.

        A name prefixed with ``-`` switches that feature off, so
        ``default,-float`` is the default set without FLOAT.
        """
        if not spec:
            return cls()
        on = dict.fromkeys(cls.NAMES, False)
        for word in (w.strip() for w in spec.split(',')):
            if not word:
                continue
            value = not word.startswith('-')
            name = word.lstrip('-+')
            if name == 'default':
                on.update(dict.fromkeys(DEFAULT, value))
            elif name == 'all':
                on.update(dict.fromkeys(cls.NAMES, value))
            elif name in on:
                on[name] = value
            else:
                raise ValueError(f'unknown BTF feature {name!r}; known: '
                                 + ', '.join(cls.NAMES))
        return cls(**on)

    def names(self) -> list[str]:
        return [n for n in self.NAMES if getattr(self, n)]
