"""The stored encoding of a version round-trips; the ledger's own reads get back the names its
caches are keyed by as the interpreter's one interned string of each."""

from __future__ import annotations

import sys

import pytest

from processors.model import EdgeVersion
from state import codec


def _version() -> EdgeVersion:
    return EdgeVersion(
        edge_id="e1", tenant="acme", src="Service:cmdb:S1", rel="owned_by", dst="Team:hr:T1",
        valid_from=None, valid_to=1_000, tx_from=5, tx_to=None, authority="cmdb", source_record="svc/S1",
        source_version="3", evidence="owner group T1", confidence=0.9, origin="e1", supersedes=("e0",),
        event_id="ev-1", detected_at=4,
    )


@pytest.mark.parametrize("decode", [codec.decode_version, codec.decode_interned_version])
def test_a_version_round_trips(decode) -> None:
    version = _version()
    assert decode(codec.encode_version(version)) == version


def test_the_ledgers_reads_get_the_interned_names() -> None:
    decoded = codec.decode_interned_version(codec.encode_version(_version()))
    for name in (decoded.tenant, decoded.src, decoded.rel, decoded.dst, decoded.authority):
        assert name is sys.intern(name.encode().decode())  # a fresh copy interns to that very object


@pytest.mark.parametrize("entity_id", ["Service:cmdb:S1", "Service:a\x00b", "Service:\x00", "Person:hr:é\x01"])
def test_an_alias_row_round_trips_whatever_the_source_put_in_the_id(entity_id: str) -> None:
    """A source's id may hold any character, NUL too; a normalised name holds none."""
    assert codec.decode_alias(codec.encode_alias(7, entity_id, "billing core")) == (7, entity_id, "billing core")
