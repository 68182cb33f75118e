"""Adding a BTF kind touches its registry entry and nothing else.

A toy kind (number 20, free in Linux 6.1 to 6.12: a reference to one type,
like TYPE_TAG) goes into a registry built for this test.  With only that
entry, the codec reads and writes it, dump prints it, the model remaps it
and hashing gives its copies one hash (what the link merges by); the
validator, which follows the kernel, rejects it by name, and a reader with
the kernel's registry by number.  (Dedup's kind classes come from Linux's
registry only: a toy kind is not deduplicated here.)
"""
from __future__ import annotations

from enum import IntEnum

import pytest

from objbtf.btf import Btf, BtfError, BtfType, Kind, Member, encode_btf, parse_btf
from objbtf.btf.dump import dump_btf
from objbtf.btf.hashing import type_hashes
from objbtf.btf.kinds import KINDS, SIZE, TYPE, KindInfo
from objbtf.btf.validate import validate, validate_bytes


class ToyKind(IntEnum):
    TOY_TAG = 20
    TOY_NUMBER = 21


TOY = KindInfo(ToyKind.TOY_TAG, TYPE, refs=('type',), modifier=True)
#: A second toy: a leaf with a size, like FLOAT.
TOY_LEAF = KindInfo(ToyKind.TOY_NUMBER, SIZE, leaf=True)
REGISTRY = KINDS.with_kinds(TOY, TOY_LEAF)


def table(copies: int) -> Btf:
    """int, then ``copies`` times: a toy tag on int, a pointer to it, and a
    struct holding that pointer."""
    btf = Btf()
    int_id = btf.add(BtfType(Kind.INT, 'int', size=4, bits=32))
    for _ in range(copies):
        toy = btf.add(BtfType(ToyKind.TOY_TAG, 'user', type=int_id))
        ptr = btf.add(BtfType(Kind.PTR, type=toy))
        btf.add(BtfType(Kind.STRUCT, 'holder', size=8, items=(Member('p', ptr, 0),)))
    return btf


def keys(btf: Btf) -> list[tuple]:
    return [t.key() for _, t in btf.own()]


def test_the_codec_reads_and_writes_a_new_kind_from_its_entry_alone():
    btf = table(1)
    raw = encode_btf(btf, kinds=REGISTRY)
    again = parse_btf(raw, kinds=REGISTRY)
    assert keys(again) == keys(btf)
    assert again[2].refs() == (1,) and again[4].refs() == (3,)
    assert encode_btf(again, kinds=REGISTRY) == raw
    big = encode_btf(btf, byteorder='big', kinds=REGISTRY)
    assert keys(parse_btf(big, kinds=REGISTRY)) == keys(btf)
    with pytest.raises(BtfError, match='type 2 has unknown kind 20'):
        parse_btf(raw)
    with pytest.raises(BtfError, match='TOY_TAG, which this registry does not know'):
        encode_btf(btf)


def test_dump_prints_a_new_kind_as_its_entry_describes_it():
    lines = list(dump_btf(parse_btf(encode_btf(table(1), kinds=REGISTRY), kinds=REGISTRY)))
    assert lines[1] == "[2] TOY_TAG 'user' type_id=1"
    assert lines[2] == "[3] PTR '(anon)' type_id=2"


def test_copies_of_a_new_kind_hash_alike_and_remap():
    hashes, _ = type_hashes(table(2))
    assert hashes[2:5] == hashes[5:8]
    assert len(set(hashes[2:5])) == 3
    tag = BtfType(ToyKind.TOY_TAG, 'user', type=7)
    tag.remap(lambda i: i + 1)
    assert tag.type == 8 and tag.refs() == (8,)


def test_a_new_leaf_kind_round_trips_and_dumps_its_size():
    btf = Btf()
    for size in (2, 4, 8):
        btf.add(BtfType(ToyKind.TOY_NUMBER, 'num', size=size))
    again = parse_btf(encode_btf(btf, kinds=REGISTRY), kinds=REGISTRY)
    assert keys(again) == keys(btf)
    assert list(dump_btf(again))[2] == "[3] TOY_NUMBER 'num' size=8"


def test_the_validator_rejects_a_kind_linux_does_not_know():
    btf = table(1)
    [problem] = validate(btf)
    assert (problem.type_id, problem.kind) == (2, 'TOY_TAG')
    assert 'not one Linux knows' in problem.message
    raw = encode_btf(btf, kinds=REGISTRY)
    [problem] = validate_bytes(raw)
    assert problem.type_id == 2 and problem.message == 'unknown kind 20'
