"""The BTF reader's lazy tables, the string section and the writer.

``parse_btf`` checks a blob whole but builds each type only when used: it
must fail exactly where and how parsing every type in order fails, and give
the same types.  The reference here is that plain walk with ``TypeParser``.
"""
from __future__ import annotations

import random
import struct

import pytest

from fixtures.btf import inputs
from objbtf.btf import Btf, BtfError, BtfType, Enumerator, Kind, Member, encode_btf, parse_btf
from objbtf.btf.header import BtfHeader, order_char
from objbtf.btf.reader import TypeParser
from objbtf.btf.strings import StringReader, StringTable
from objbtf.btf.types import VOID, head


def walk(blob: bytes, base: Btf | None = None) -> list[tuple]:
    """Every type's key, parsed one after the other (no laziness)."""
    h = BtfHeader.read(blob)
    strdata = h.strings(blob)
    if strdata[:1] not in (b'', b'\0') and base is None:
        raise BtfError('the string section does not start with NUL')
    strings = StringReader(strdata, base.strings if base is not None else None)
    parser = TypeParser(h.types(blob), order_char(h.order), strings)
    keys, pos = [], 0
    type_id = base.next_id if base is not None else 1
    while pos < len(parser.tdata):
        t, pos = parser.parse(pos, type_id)
        keys.append(t.key())
        type_id += 1
    return keys


def outcome(fn, *args) -> tuple:
    """What ``fn`` returns, or the exception it raises (its class and message)."""
    try:
        return ('ok', fn(*args))
    except Exception as err:        # noqa: BLE001 - the comparison is the point
        return ('error', type(err).__name__, str(err))


def lazily(blob: bytes, base: Btf | None = None) -> list[tuple]:
    btf = parse_btf(blob, base)
    return [t.key() for _, t in btf.own()]


def same_outcome(blob: bytes) -> None:
    assert outcome(lazily, blob) == outcome(walk, blob)


def zoo_blob() -> bytes:
    return encode_btf(inputs.zoo()[0])


def test_lazy_parse_fails_as_the_walk_does():
    """Random damage to a blob of every kind: the same error, or the same types."""
    good = zoo_blob()
    h = BtfHeader.read(good)
    hdr_len, type_off, type_len = h.hdr_len, h.type_off, h.type_len
    rng = random.Random(3)
    for _ in range(3000):
        blob = bytearray(good)
        for _ in range(rng.choice([1, 1, 2, 3])):
            pos = hdr_len + type_off + rng.randrange(type_len)
            blob[pos] = rng.choice([0, 1, 0xff, rng.randrange(256)])
        same_outcome(bytes(blob))
    for cut in range(type_len + 1):           # the type section cut short
        blob = bytearray(good)
        struct.pack_into('<I', blob, 12, cut)
        same_outcome(bytes(blob))


def test_types_are_built_once_on_first_use():
    btf = parse_btf(zoo_blob())
    heads = btf.heads()
    third = btf[3]
    assert btf[3] is third
    assert btf.types[3] is third and len(btf) == len(heads)
    assert heads == [head(t) for _, t in btf.own()] == btf.heads()


def test_lazy_split_table():
    base_raw = zoo_blob()
    base = parse_btf(base_raw)
    split = Btf(base=base)
    split.add(BtfType(Kind.PTR, type=2))
    split.add(BtfType(Kind.STRUCT, 'split_only', size=8,
                      items=(Member('p', base.next_id, 0), Member('x', 2, 32))))
    raw = encode_btf(split)
    assert outcome(lazily, raw, parse_btf(base_raw)) == outcome(walk, raw, parse_btf(base_raw))
    again = parse_btf(raw, parse_btf(base_raw))
    assert again[base.next_id + 1].items[0].type == base.next_id
    assert again[2].key() == base[2].key()


def test_big_endian_blob():
    btf, _ = inputs.zoo()
    btf.byteorder = 'big'
    raw = encode_btf(btf)
    assert raw[:2] == b'\xeb\x9f'
    assert lazily(raw) == walk(raw) == [t.key() for _, t in btf.own()]


def test_string_offsets_of_a_base():
    data = b'\0abc\0de\0abc\0tail'
    reader = StringReader(data)
    assert [reader.find(s) for s in ('', 'abc', 'de', 'tail', 'bc')] == [0, 1, 5, None, None]
    reader.load_all()
    assert reader[1] == reader[8] == 'abc' and reader[2] == 'bc'
    with pytest.raises(BtfError, match='string offset 13 outside'):
        reader[13]
    assert reader.valid_below() == 12


def test_non_ascii_base_strings():
    """Names are decoded with replacement; a base string that is not UTF-8
    is found by its decoded name, as it is read."""
    data = b'\0caf\xc3\xa9\0x\xff\0'
    reader = StringReader(data)
    reader.load_all()                          # not ASCII: nothing loaded at once
    assert len(reader) == 0
    assert reader[1] == 'café' and reader[7] == 'x\ufffd'
    assert reader.find('café') == 1 and reader.find('x\ufffd') == 7
    table = StringTable(reader)
    assert table['café'] == 1 and table['new'] == len(data)
    assert table.data() == b'new\0'


def test_values_the_format_cannot_hold():
    for t in (BtfType(Kind.PTR, type=1 << 32), BtfType(Kind.PTR, type=-1),
              BtfType(Kind.DECL_TAG, 'tag', type=1, component_idx=1 << 31),
              BtfType(Kind.STRUCT, 's', size=4, kflag=1, items=(Member('m', 1, 0, 1 << 8),))):
        with pytest.raises(BtfError, match='does not fit'):
            encode_btf(Btf([VOID, BtfType(Kind.INT, 'int', 4, bits=32), t]))
    wide = BtfType(Kind.ENUM, 'e', 4, items=(Enumerator('E', -1),) * 0x10000)
    with pytest.raises(Exception, match='more than BTF can hold'):
        encode_btf(Btf([VOID, wide]))
