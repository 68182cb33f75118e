"""Every object of the reference kernel: objbtf's BTF against pahole's, and the kernel's verdict.

Runs on copies, so the shared build tree stays as Kbuild left it; in the
default tier on a sample (conftest.kernel_sample).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from conftest import need
from kernel_tree import objects
from pahole_compare import extra_percpu_vars, pahole_btf

pytestmark = pytest.mark.kernel


def _check_one(obj: str) -> tuple[str, list[str], int, bytes | None]:
    """Encode a copy of ``obj``; return (obj, differences from pahole, extra vars, .BTF)."""
    from objbtf.encode.object_file import encode_path
    from objbtf.features import Features
    from pahole_compare import differences as diff
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, os.path.basename(obj))
        shutil.copyfile(obj, copy)
        enc = encode_path(copy, Features())
        if enc is None:
            return obj, [], 0, None
        try:
            theirs = pahole_btf(Path(obj))
        except Exception as err:     # pahole cannot read a few real-mode objects
            return obj, [f'pahole failed: {err}'], 0, enc.raw
        return obj, diff(enc.btf, theirs, Path(obj)), extra_percpu_vars(enc.btf), enc.raw


@pytest.fixture(scope='module')
def encoded_kernel(kernel_build, kernel_sample):
    need('pahole')
    objs = [str(p) for p in objects(kernel_build)[::kernel_sample]]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(_check_one, objs, chunksize=8))


def test_every_object_matches_pahole(encoded_kernel, kernel_sample):
    encoded = [r for r in encoded_kernel if r[3] is not None]
    assert len(encoded) > 800 // kernel_sample
    pahole_failed = [o for o, probs, _, _ in encoded if probs and probs[0].startswith('pahole failed')]
    # pahole 1.24 cannot encode the 16-bit real-mode objects; objbtf can.
    assert all('/realmode/rm/' in o for o in pahole_failed), pahole_failed
    bad = {o: p for o, p, _, _ in encoded if p and o not in pahole_failed}
    assert bad == {}
    # The documented difference: percpu variables in .data..percpu..* subsections.
    # (in every supported kernel's reference build, at least 39; some in any sample)
    assert sum(extra for _, _, extra, _ in encoded) >= (39 if kernel_sample == 1 else 1)


def test_kernel_accepts_every_object(encoded_kernel, kernel_loader):
    rejected = {}
    for obj, _, _, raw in encoded_kernel:
        if raw is not None:
            verdict = kernel_loader(raw)
            if not verdict.ok:
                rejected[obj] = verdict.log.strip().splitlines()[-3:]
    assert rejected == {}
