"""merge.py's passes over the chunks' hashes in C (linkdedup/_merge.c) against the Python ones.

The compiled build scans the chunks, finds the hashes that involve an
ambiguous name and lays the merged table out in C; merge.py keeps the
Python twins for the pure-Python build.  Where the C runs, it must give
what the Python gives; where the Python would raise (a reference past a
blob's last type) or the input is not what it expects, the C gives None
and the Python decides.  test_link_kernel.py compares the whole link with
pahole and libbpf, and with the link that merges nothing.
"""
from __future__ import annotations

import random
from array import array
from collections import Counter

import pytest

from kernel_tree import TMP_VMLINUX
from test_blob_passes import TYPE_FIELDS

import objbtf
from linkdedup import merge
from linkdedup.concat import split_blobs
from linkdedup.pipeline import LinkState, read_pass
from linkdedup.rehash import hashed_chunk
from linkdedup.settings import LinkSettings
from objbtf.btf.errors import BtfError
from objbtf.btf.kinds import BTF_HEADER_LEN, Kind
from objbtf.btf.reader import parse_btf
from objbtf.btf.types import Btf, BtfType, Member
from objbtf.btf.writer import encode_btf
from objbtf.elf.reader import ElfFile
from objbtf.features import Features

_C = merge._C


@pytest.fixture(scope='module', autouse=True)
def c_merge():
    """linkdedup._merge, which the compiled build must have."""
    if _C is None:
        pytest.fail(f'objbtf runs {objbtf.implementation()}, without the C merge: '
                    'install it compiled (scripts/install.sh)')


def parts_of(raws: list[bytes], chunks: list | None = None) -> list[merge._Part]:
    """The merge's parts of these blobs, concatenated as ld would, with these
    chunks or hashed as the link hashes blobs without chunks."""
    section = b''.join(raw + bytes(-len(raw) % 4) for raw in raws)
    blobs = split_blobs(section)
    return [merge._Part(i, b, chunks[i] if chunks else hashed_chunk(b))
            for i, b in enumerate(blobs)]


def hash_arrays(parts: list[merge._Part]) -> list[tuple]:
    return [(p.chunk.hashes, p.chunk.flags) for p in parts]


def records(parts: list[merge._Part]) -> list[tuple]:
    return [(p.chunk.hashes, p.chunk.flags, p.offsets, p.types, p.strings.view, p.big_endian)
            for p in parts]


def python_scan(parts: list[merge._Part]) -> tuple[dict[int, int], list[int]]:
    return merge._first_occurrences(parts), merge._unmergeable(parts)


def parsed_first(parts: list[merge._Part], first: dict[int, int]) -> dict[int, BtfType]:
    return merge._parse_positions(parts, first.values(), lambda blob: None)


def fields(t: BtfType) -> tuple:
    return tuple(getattr(t, f) for f in TYPE_FIELDS)


def assert_same_merge(parts: list[merge._Part], first: dict[int, int],
                      unmergeable: list[int], start: int) -> None:
    """The C merge's table is the Python merge's, type for type."""
    order, types = merge._merged(parts, first, unmergeable, start, lambda blob: None)
    c_order, c_types = merge._c_merged(parts, first, unmergeable, start, lambda blob: None)
    assert c_order == order
    assert [fields(t) for t in c_types] == [fields(t) for t in types]


def struct(name: str, member: str, type_id: int) -> BtfType:
    return BtfType(Kind.STRUCT, name, 4, items=(Member(member, type_id, 0, 0),))


def object_btf(definition: BtfType, byteorder: str = 'little') -> bytes:
    """A blob with an int, ``definition`` (of the int), a pointer to it, a
    typedef of the pointer and a forward of it."""
    btf = Btf(byteorder=byteorder)
    btf.types += [BtfType(Kind.INT, 'int', 4, encoding=1, bits=32), definition,
                  BtfType(Kind.PTR, type=2), BtfType(Kind.TYPEDEF, 'foo_p', type=3),
                  BtfType(Kind.FWD, definition.name)]
    return encode_btf(btf)


#: Two objects with different definitions of struct foo, two with the same
#: struct bar: foo's hashes, the pointers' and the typedefs' to them are unsafe.
AMBIGUOUS = [struct('foo', 'a', 1), struct('foo', 'b', 1), struct('bar', 'c', 1),
             struct('bar', 'c', 1)]


@pytest.mark.parametrize('byteorder', ['little', 'big'])
def test_c_merge_of_ambiguous_names_is_python_s(byteorder):
    parts = parts_of([object_btf(d, byteorder) for d in AMBIGUOUS])
    first, unmergeable = _C.first_occurrences(hash_arrays(parts))
    assert (first, unmergeable) == python_scan(parts)
    unsafe = _C.unsafe_hashes(records(parts), first)
    assert unsafe == merge._unsafe_hashes(parts, first, parsed_first(parts, first))
    foo = {p.chunk.hashes[k] for p in parts[:2] for k in (1, 2, 3)}
    assert unsafe == foo
    assert_same_merge(parts, first, unmergeable, 1)
    assert_same_merge(parts, first, unmergeable, 100)


def broken(raws: list[bytes], damage) -> list[merge._Part]:
    """The parts of ``raws`` after ``damage(blob)`` to the first one's bytes,
    with the chunks of the blobs before."""
    chunks = [p.chunk for p in parts_of(raws)]
    blob = bytearray(raws[0])
    damage(blob)
    return parts_of([bytes(blob), *raws[1:]], chunks)


def pointer_word(blob: bytearray, word: int, value: int) -> None:
    """Adds ``value`` to word ``word`` of type 3 (the PTR) of little-endian ``blob``."""
    at = BTF_HEADER_LEN + parse_offsets(bytes(blob))[2] + 4 * word
    blob[at:at + 4] = (int.from_bytes(blob[at:at + 4], 'little') + value).to_bytes(4, 'little')


def parse_offsets(raw: bytes) -> list[int]:
    offsets: list[int] = []
    parse_btf(raw, offsets=offsets)
    return offsets


def dangling_pointer(blob: bytearray) -> None:
    pointer_word(blob, 2, 7)                # type 2 -> 9, past the last (5)


def pointer_with_vlen(blob: bytearray) -> None:
    pointer_word(blob, 1, 1)                # info: vlen 1


def assert_python_says(parts: list[merge._Part], message: str) -> None:
    """The C merge leaves ``parts`` to the Python, which names the blob."""
    first, unmergeable = _C.first_occurrences(hash_arrays(parts))
    assert merge._c_merged(parts, first, unmergeable, 1, lambda blob: None) is None
    with pytest.raises(BtfError, match=f'{parts[0].blob.label}: .*{message}'):
        merge.merge_blobs([p.blob for p in parts], [p.chunk for p in parts], None, 'little')


def test_c_merge_gives_up_where_python_raises():
    """A pointer past its blob's last type, among types the walk from an
    ambiguous name reads, or among the types kept: the Python names the blob."""
    parts = broken([object_btf(d) for d in AMBIGUOUS], dangling_pointer)
    first, _ = _C.first_occurrences(hash_arrays(parts))
    assert _C.unsafe_hashes(records(parts), first) is None
    with pytest.raises(BtfError, match='past the last type'):
        merge._unsafe_hashes(parts, first, parsed_first(parts, first))
    assert_python_says(parts, 'past the last type')
    safe = [object_btf(d) for d in AMBIGUOUS[2:]]
    assert_python_says(broken(safe, dangling_pointer), 'past the last type')


def test_c_merge_leaves_what_the_parser_refuses_to_the_python():
    """A record the C copies as it is, but the parser refuses (a PTR with a
    vlen): the error names the blob, as the pure-Python build's does."""
    vlen = broken([object_btf(d) for d in AMBIGUOUS[2:]], pointer_with_vlen)
    assert_python_says(vlen, 'vlen 1 must be 0')


def test_c_merge_gives_up_on_what_it_does_not_expect():
    parts = parts_of([object_btf(d) for d in AMBIGUOUS])
    first, unmergeable = _C.first_occurrences(hash_arrays(parts))
    cut = records(parts)
    cut[1] = (*cut[1][:3], bytes(cut[1][3])[:20], *cut[1][4:])      # a record cut short
    assert _C.unsafe_hashes(cut, first) is None
    past = len(parts) << merge._LOCAL_BITS | 1
    assert _C.unsafe_hashes(records(parts), {**first, 12345: past}) is None
    assert _C.layout(hash_arrays(parts), first, set(), [past], 1) is None


def mutated(rng: random.Random, raws: list[bytes]) -> list[merge._Part]:
    """The parts of ``raws`` with one to three mutations that the link
    trusts (a re-signed chunk): a byte of a blob's type section, a type's
    offset, a hash copied over another's, a flag flipped."""
    blobs = [bytearray(raw) for raw in raws]
    chunks = [p.chunk for p in parts_of(raws)]
    for c in chunks:
        c.hashes, c.offsets, c.flags = array('Q', c.hashes), array('I', c.offsets), bytearray(c.flags)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(chunks))
        c, local = chunks[k], rng.randrange(chunks[k].count)
        what = rng.randrange(4)
        if what == 0:
            at = rng.randrange(BTF_HEADER_LEN, len(blobs[k]))
            blobs[k][at] = rng.randrange(256)
        elif what == 1:
            c.offsets[local] = rng.randrange(c.offsets[-1] + 40)
        elif what == 2:
            other = chunks[rng.randrange(len(chunks))]
            c.hashes[local] = other.hashes[rng.randrange(other.count)]
        else:
            c.flags[local] ^= 1
    for c in chunks:
        c.flags = bytes(c.flags)
    return parts_of([bytes(b) for b in blobs], chunks)


def test_c_merge_never_gives_what_python_refuses():
    """Damage the link trusts, 3,000 times: wherever the Python merge
    raises, the C gives up; wherever the C gives a table, it is the
    Python's.  (The fuzzer's re-signed link cases reach it too.)"""
    rng = random.Random(23)
    raws = [object_btf(d) for d in AMBIGUOUS] + [object_btf(d, 'big') for d in AMBIGUOUS]
    outcomes = Counter()
    for _ in range(3000):
        parts = mutated(rng, raws)
        first, unmergeable = _C.first_occurrences(hash_arrays(parts))
        try:
            order, types = merge._merged(parts, first, unmergeable, 1, lambda blob: None)
        except BtfError:
            python = None
        else:
            python = order, [fields(t) for t in types]
        c = merge._c_merged(parts, first, unmergeable, 1, lambda blob: None)
        if c is not None:
            assert python is not None, 'the C merged what the Python refuses'
            assert (c[0], [fields(t) for t in c[1]]) == python
        outcomes['python raised' if python is None else
                 'C gave up' if c is None else 'the same table'] += 1
    assert outcomes['the same table'] > 500 and outcomes['python raised'] > 500, outcomes


@pytest.fixture(scope='module')
def kernel_parts(encoded_kernel) -> list[merge._Part]:
    """The parts the vmlinux link merges."""
    path = str(encoded_kernel / TMP_VMLINUX)
    with ElfFile.open(path) as elf:
        state = LinkState(LinkSettings(path, Features()))
        state.elf = elf
        read_pass(state)
        yield [merge._Part(i, b, state.inputs.chunks[i])
               for i, b in enumerate(state.inputs.blobs)]


@pytest.mark.kernel
def test_c_merge_of_the_kernel_is_python_s(kernel_parts):
    parts = kernel_parts
    first, unmergeable = _C.first_occurrences(hash_arrays(parts))
    assert (first, unmergeable) == python_scan(parts)
    unsafe = _C.unsafe_hashes(records(parts), first)
    assert unsafe == merge._unsafe_hashes(parts, first, parsed_first(parts, first))
    assert unsafe, 'the reference kernel has names defined differently in different objects'
    assert_same_merge(parts, first, unmergeable, 1)


@pytest.mark.kernel
def test_c_merge_releases_each_blob_once_read(kernel_parts):
    """Each pass over the records lets the link drop a blob's pages once it
    is done with them, blob after blob: the vmlinux link's peak memory."""
    parts = kernel_parts
    first, unmergeable = _C.first_occurrences(hash_arrays(parts))
    released: list[int] = []
    unsafe = _C.unsafe_hashes(records(parts), first, released.append)
    assert released == sorted({pos >> merge._LOCAL_BITS for pos in first.values()})
    order, maps = _C.layout(hash_arrays(parts), first, unsafe, unmergeable, 1)
    released.clear()
    _C.merged(records(parts), order, maps, merge._CLASSES, released.append)
    assert released == sorted({pos >> merge._LOCAL_BITS for pos in order})


@pytest.mark.kernel
def test_c_merge_reads_big_endian_blobs_as_little(kernel_parts):
    """Every blob of the kernel written big-endian: the same unsafe hashes."""
    big = parts_of([encode_btf(parse_btf(bytes(p.blob.data)), byteorder='big')
                    for p in kernel_parts])
    assert all(p.big_endian for p in big)
    for p, b in zip(kernel_parts, big):       # the link's hashes, not the ones made again
        b.chunk = p.chunk
    first, _ = _C.first_occurrences(hash_arrays(kernel_parts))
    assert _C.unsafe_hashes(records(big), first) == _C.unsafe_hashes(records(kernel_parts),
                                                                     first)
