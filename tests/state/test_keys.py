"""Byte order of encoded keys equals tuple order, and encoding round-trips."""

import struct

from hypothesis import given
from hypothesis import strategies as st

from state.keys import Descending, encode_int, encode_int_desc, encode_str, pack, unpack

part = st.one_of(st.text(max_size=12), st.integers(min_value=-(2**62), max_value=2**62))
same_shape_tuples = st.lists(st.tuples(st.text(max_size=8), st.integers(-(2**62), 2**62), st.text(max_size=8)),
                             min_size=2, max_size=2)


@given(same_shape_tuples)
def test_byte_order_equals_tuple_order(pair) -> None:
    a, b = pair
    assert (pack(*a) < pack(*b)) == (a < b)
    assert (pack(*a) == pack(*b)) == (a == b)


@given(st.lists(part, max_size=6))
def test_round_trip(parts) -> None:
    assert unpack(pack(*parts)) == tuple(parts)


@given(st.integers(-(2**62), 2**62), st.integers(-(2**62), 2**62))
def test_descending_integers_sort_newest_first(a: int, b: int) -> None:
    assert (pack(Descending(a)) < pack(Descending(b))) == (a > b)


@given(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6))
def test_a_prefix_scan_never_matches_a_longer_id(a: str, b: str, c: str) -> None:
    """Ids that share leading characters never fall into each other's prefix range."""
    if a != b:
        assert not pack(b, c).startswith(pack(a))


@given(same_shape_tuples)
def test_one_encoding_is_a_prefix_of_another_only_for_tuple_prefixes(pair) -> None:
    a, b = pair
    for cut in range(1, 4):
        assert pack(*b).startswith(pack(*a[:cut])) == (b[:cut] == a[:cut])


def _reference_str(value: str) -> bytes:
    return b"\x02" + value.encode("utf-8").replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def _reference_int(value: int, tag: bytes = b"\x15") -> bytes:
    return tag + struct.pack(">Q", (value + (1 << 63)) % (1 << 64))


@given(st.text())
def test_a_string_part_is_its_utf8_with_nul_escaped_and_a_terminator(value: str) -> None:
    assert encode_str(value) == _reference_str(value) == pack(value)


@given(st.integers(-(2**63), 2**63 - 1))
def test_an_integer_part_is_its_sign_flipped_big_endian_bytes(value: int) -> None:
    assert encode_int(value) == _reference_int(value) == pack(value)
    assert encode_int_desc(value) == b"\x16" + bytes(255 - byte for byte in _reference_int(value)[1:])
