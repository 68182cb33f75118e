"""Adding a BTF kind touches its registry entry and nothing else.

Toy kinds (numbers 20 on, free in Linux 6.1 to 6.12) go into a registry
built for this test, each described as a Linux kind is, under another
number: a tag (as TYPE_TAG), a number (as FLOAT), a note (as DECL_TAG),
an enum (as ENUM), a pair (as ARRAY) and a record (as STRUCT).  With only
their entries, the codec reads and writes them, dump prints them, the model
remaps them, hashing gives their copies one hash (what the link merges by),
and dedup merges their copies into one, as libbpf's btf__dedup merges the
Linux kinds they stand for; the validator, which follows the kernel,
rejects them by name, and a reader with the kernel's registry by number.
"""
from __future__ import annotations

from enum import IntEnum

import pytest

from btf_shapes import kind_counts
from libbpf_oracle import assert_same_btf, libbpf_dedup
from objbtf.btf import (Btf, BtfError, BtfType, Enumerator, Kind, Member, encode_btf,
                        parse_btf)
from objbtf.btf.dedup import dedup
from objbtf.btf.dump import dump_btf
from objbtf.btf.hashing import type_hashes
from objbtf.btf.kinds import (BITFIELD, BTF_ARRAY, BTF_DECL_TAG, BTF_ENUM, BTF_MEMBER, COMPOSITE,
                              ENTRIES, ENUMS, KINDS, SIGNED, SIZE, TYPE, ZERO, KindInfo)
from objbtf.btf.validate import validate, validate_bytes
from test_dedup import grouped_kinds


class ToyKind(IntEnum):
    TOY_TAG = 20
    TOY_NUMBER = 21
    TOY_NOTE = 22
    TOY_ENUM = 23
    TOY_PAIR = 24
    TOY_RECORD = 25


TOY = KindInfo(ToyKind.TOY_TAG, TYPE, refs=('type',), modifier=True)
#: A leaf with a size, like FLOAT.
TOY_LEAF = KindInfo(ToyKind.TOY_NUMBER, SIZE, leaf=True)
#: One target and a fixed word, like DECL_TAG.
TOY_NOTE = KindInfo(ToyKind.TOY_NOTE, TYPE, fixed=BTF_DECL_TAG, refs=('type',))
#: Of the ENUM family: its forward matches a full enum of its name.
TOY_ENUM = KindInfo(ToyKind.TOY_ENUM, SIZE, entry=BTF_ENUM, vlen=ENTRIES, kflag=SIGNED,
                    leaf=True, named_entries='value name', family=ENUMS)
#: Two targets in its fixed part, like ARRAY.
TOY_PAIR = KindInfo(ToyKind.TOY_PAIR, ZERO, fixed=BTF_ARRAY, refs=('type', 'index_type'))
#: Of the STRUCT/UNION family.
TOY_RECORD = KindInfo(ToyKind.TOY_RECORD, SIZE, entry=BTF_MEMBER, vlen=ENTRIES, kflag=BITFIELD,
                      named_entries='member name', family=COMPOSITE)
REGISTRY = KINDS.with_kinds(TOY, TOY_LEAF, TOY_NOTE, TOY_ENUM, TOY_PAIR, TOY_RECORD)
#: The Linux kind each toy kind is described as.
AS_LINUX = {ToyKind.TOY_TAG: Kind.TYPE_TAG, ToyKind.TOY_NUMBER: Kind.FLOAT,
            ToyKind.TOY_NOTE: Kind.DECL_TAG, ToyKind.TOY_ENUM: Kind.ENUM,
            ToyKind.TOY_PAIR: Kind.ARRAY, ToyKind.TOY_RECORD: Kind.STRUCT}
AS_TOY = {linux: toy for toy, linux in AS_LINUX.items()}


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


def add_unit(btf: Btf, forward: bool = False) -> None:
    """What one compile unit might hold of every toy kind: a record that
    points to itself and holds a tagged int, a number, a signed enum (or,
    with ``forward``, the enum's forward) and a pair of numbers, with a note
    on the record."""
    add = btf.add
    int_id = add(BtfType(Kind.INT, 'int', size=4, encoding=1, bits=32))
    num = add(BtfType(ToyKind.TOY_NUMBER, 'num', size=8))
    add(BtfType(ToyKind.TOY_NUMBER, 'num', size=4))             # another number
    tag = add(BtfType(ToyKind.TOY_TAG, 'user', type=int_id))
    items = () if forward else (Enumerator('LOW', -1), Enumerator('HIGH', 1))
    mode = add(BtfType(ToyKind.TOY_ENUM, 'mode', size=4, kflag=int(not forward), items=items))
    pair = add(BtfType(ToyKind.TOY_PAIR, type=num, index_type=int_id, nelems=2))
    rec = btf.next_id + 1
    self_ptr = add(BtfType(Kind.PTR, type=rec))
    assert add(BtfType(ToyKind.TOY_RECORD, 'rec', size=40, items=(
        Member('next', self_ptr, 0), Member('n', tag, 64), Member('m', mode, 96),
        Member('pair', pair, 128)))) == rec
    add(BtfType(ToyKind.TOY_NOTE, 'note', type=rec, component_idx=-1))


def units(count: int, base: Btf | None = None) -> Btf:
    """``count`` units in one table (the second with the enum's forward)."""
    btf = Btf(base=base)
    for k in range(count):
        add_unit(btf, forward=k == 1)
    return btf


def with_kinds(btf: Btf, kinds: dict, base: Btf | None = None) -> Btf:
    """``btf`` with the kinds of its types changed as ``kinds`` says."""
    out = Btf(base=base)
    for _, t in btf.own():
        c = t.copy()
        c.kind = kinds.get(c.kind, c.kind)
        out.add(c)
    return out


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


def test_every_toy_kind_round_trips_in_either_byte_order():
    btf = units(2)
    for order in ('little', 'big'):
        raw = encode_btf(btf, byteorder=order, kinds=REGISTRY)
        again = parse_btf(raw, kinds=REGISTRY)
        assert keys(again) == keys(btf)
        assert encode_btf(again, kinds=REGISTRY) == raw
    assert set(kind_counts(btf)) >= {k.name for k in ToyKind}


def test_dump_prints_a_new_kind_as_its_entry_describes_it():
    lines = list(dump_btf(parse_btf(encode_btf(table(1), kinds=REGISTRY), kinds=REGISTRY)))
    assert lines[1] == "[2] TOY_TAG 'user' type_id=1"
    assert lines[2] == "[3] PTR '(anon)' type_id=2"
    lines = list(dump_btf(units(1)))
    assert "[6] TOY_PAIR '(anon)' type_id=2 index_type_id=1" in lines
    at = lines.index("[5] TOY_ENUM 'mode' size=4 vlen=2")
    assert lines[at + 1:at + 3] == ["\t'LOW' value=-1", "\t'HIGH' value=1"]
    at = lines.index("[8] TOY_RECORD 'rec' size=40 vlen=4")
    assert lines[at + 1:at + 3] == ["\t'next' type_id=7 bit_offset=0 bitfield_size=0",
                                    "\t'n' type_id=4 bit_offset=64 bitfield_size=0"]
    assert lines[-1] == "[9] TOY_NOTE 'note' type_id=8"


def test_copies_of_a_new_kind_hash_alike_and_remap():
    hashes, _ = type_hashes(table(2), REGISTRY)
    assert hashes[2:5] == hashes[5:8]
    assert len(set(hashes[2:5])) == 3
    btf = units(3)
    size = len(btf) // 3
    hashes, flags = type_hashes(btf, REGISTRY)
    assert hashes[1:1 + size] == hashes[1 + 2 * size:] and not any(flags)
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


@pytest.mark.parametrize('legacy', [True, False], ids=['libbpf-1.1', 'upstream'])
def test_dedup_merges_copies_of_new_kinds_as_libbpf_merges_their_linux_kinds(legacy):
    """Three units (one with the enum's forward) come out as one: each toy
    type once, the forward gone to the full enum; and the result is what
    libbpf's btf__dedup makes of the same table with the Linux kinds."""
    btf = units(3)
    ours = dedup(btf, libbpf_1_1=legacy, kinds=REGISTRY)
    assert kind_counts(ours) == kind_counts(units(1))
    mode = next(t for _, t in ours.own() if t.kind is ToyKind.TOY_ENUM)
    assert len(mode.items) == 2 and mode.signed
    linux = encode_btf(with_kinds(btf, AS_LINUX))
    theirs = with_kinds(parse_btf(libbpf_dedup(linux)), AS_TOY)
    assert_same_btf(ours, theirs)
    again = parse_btf(encode_btf(ours, kinds=REGISTRY), kinds=REGISTRY)
    assert keys(dedup(again, libbpf_1_1=legacy, kinds=REGISTRY)) == keys(ours)


@pytest.mark.parametrize('legacy', [True, False], ids=['libbpf-1.1', 'upstream'])
def test_split_dedup_maps_new_kinds_to_their_base_copies(legacy):
    """A module's copies of toy types go to the base's, found through the
    base's groups (which agree with the table keys), as libbpf's split
    dedup maps the Linux kinds."""
    base_raw = encode_btf(dedup(units(1), kinds=REGISTRY), kinds=REGISTRY)
    base = parse_btf(base_raw, kinds=REGISTRY)
    assert {k.name for k in ToyKind} <= grouped_kinds(base, legacy, REGISTRY)
    rec = base.next_id - 2
    assert base[rec].kind is ToyKind.TOY_RECORD
    split = units(2, base)
    split.add(BtfType(Kind.CONST, type=rec))       # the one type the base lacks
    ours = dedup(split, libbpf_1_1=legacy, kinds=REGISTRY)
    assert keys(ours) == [BtfType(Kind.CONST, type=rec).key()]
    linux_base_raw = encode_btf(with_kinds(parse_btf(base_raw, kinds=REGISTRY), AS_LINUX))
    linux_base = parse_btf(linux_base_raw)
    linux = encode_btf(with_kinds(split, AS_LINUX, linux_base))
    theirs = parse_btf(libbpf_dedup(linux, linux_base_raw), linux_base)
    assert_same_btf(ours, with_kinds(theirs, AS_TOY, base))


def test_dedup_takes_its_kinds_from_the_registry_it_is_given():
    with pytest.raises(BtfError, match='cannot deduplicate a type of kind TOY_'):
        dedup(units(2))


def test_the_validator_rejects_a_kind_linux_does_not_know():
    btf = table(1)
    [problem] = validate(btf)
    assert (problem.type_id, problem.kind) == (2, 'TOY_TAG')
    assert 'not one Linux knows' in problem.message
    raw = encode_btf(btf, kinds=REGISTRY)
    [problem] = validate_bytes(raw)
    assert problem.type_id == 2 and problem.message == 'unknown kind 20'
