"""Encoding features, named like pahole's ``--btf_features``."""
from __future__ import annotations

from dataclasses import dataclass, fields

#: pahole's default set (``--btf_features=default``).
DEFAULT = ('encode_force', 'var', 'float', 'decl_tag', 'type_tag', 'enum64',
           'optimized_func', 'consistent_func', 'decl_tag_kfuncs')
#: Features pahole knows but leaves off by default.
OPTIONAL = ('global_var', 'reproducible_build', 'distilled_base')


@dataclass(frozen=True, slots=True)
class Features:
    encode_force: bool = True
    var: bool = True
    float: bool = True
    decl_tag: bool = True
    type_tag: bool = True
    enum64: bool = True
    optimized_func: bool = True
    consistent_func: bool = True
    decl_tag_kfuncs: bool = True
    global_var: bool = False
    reproducible_build: bool = False
    distilled_base: bool = False

    @classmethod
    def parse(cls, spec: str | None) -> Features:
        """Parse a comma list like pahole's: names, ``default``, ``all``.

        A name prefixed with ``-`` switches that feature off, so
        ``default,-float`` is the default set without FLOAT.
        """
        if not spec:
            return cls()
        known = {f.name for f in fields(cls)}
        on = dict.fromkeys(known, False)
        for word in (w.strip() for w in spec.split(',')):
            if not word:
                continue
            value = not word.startswith('-')
            name = word.lstrip('-+')
            if name == 'default':
                on.update(dict.fromkeys(DEFAULT, value))
            elif name == 'all':
                on.update(dict.fromkeys(known, value))
            elif name in known:
                on[name] = value
            else:
                raise ValueError(f'unknown BTF feature {name!r}; known: '
                                 + ', '.join(DEFAULT + OPTIONAL))
        return cls(**on)

    def names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]
