"""The bounds on what events carry and on what reads take agree: what can be written can be read."""

from schemas.events import MAX_NAME
from schemas.query_params import ENTITY_TEXT


def test_a_read_takes_the_longest_canonical_id_an_event_can_make() -> None:
    assert len("T" * MAX_NAME + ":" + "i" * MAX_NAME) == ENTITY_TEXT
