"""The stored encoding of a version round-trips, and hands back the names the caches are keyed by
as the interpreter's one interned string of each."""

from __future__ import annotations

import sys

from processors.model import EdgeVersion
from state import codec


def _version() -> EdgeVersion:
    return EdgeVersion("e1", "acme", "Service:cmdb:S1", "owned_by", "Team:hr:T1", None, 1_000, 5, None, "cmdb",
                       "svc/S1", "3", "owner group T1", 0.9, "e1", ("e0",), "ev-1", 4, None)


def test_a_version_round_trips() -> None:
    version = _version()
    assert codec.decode_version(codec.encode_version(version)) == version


def test_decoded_names_are_the_interned_strings() -> None:
    decoded = codec.decode_version(codec.encode_version(_version()))
    for name in (decoded.tenant, decoded.src, decoded.rel, decoded.dst, decoded.authority):
        assert name is sys.intern("".join(name))  # a fresh copy of the text interns to the same object
