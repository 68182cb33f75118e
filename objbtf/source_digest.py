"""The digest of objbtf's own source files: what its caches' keys say of the code.

A cache kept across builds (the link cache, the encode cache) must not hand
out what other code wrote: an upgraded or edited objbtf misses.  The
sources decide, not the files' times: a cache copied to another machine or
kept by CI across fresh installs of the same objbtf still hits.  (The
compiled modules are built from these sources and run only when no source
is newer, with the same output: docs/contributing.md, "Compiled modules".)
"""
from __future__ import annotations

import functools
from hashlib import blake2b
from pathlib import Path

_TOP = Path(__file__).resolve().parent.parent


@functools.cache
def source_digest(*packages: str) -> bytes:
    """16 bytes over every ``*.py``, ``*.c`` and ``*.h`` of ``packages`` (top-level
    package names), by path and contents; computed once per process."""
    h = blake2b(digest_size=16)
    for package in packages:
        root = _TOP / package
        for src in sorted([*root.rglob('*.py'), *root.rglob('*.c'), *root.rglob('*.h')]):
            h.update(str(src.relative_to(_TOP)).encode(errors='surrogateescape') + b'\0')
            h.update(src.read_bytes())
    return h.digest()
