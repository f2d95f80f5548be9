"""The bounds on what events carry and on what reads take, in one place: what can be written can be read."""

from __future__ import annotations

from typing import Final

MAX_NAME: Final = 1024
"""Characters in a name or identifier: an event id, entity type, id, name or alias, relationship,
phrase, source system, record or version, actor. Each becomes part of RocksDB keys and record ids, and
some are repeated in a log record; no real name comes near it."""
TENANT_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$"
"""What a tenant id is: 1 to 128 letters, digits and ``. _ : @ + -``, beginning with a letter or digit.
A tenant is a path segment of the HTTP API and part of every Kafka key, RocksDB key and record id,
so an event naming any other tenant is refused: its facts could be written and never read."""
MAX_TEXT: Final = 64 * 1024
"""Characters in free text (evidence, reasons), carried whole in each log record of the fact."""
MAX_ALIASES: Final = 64
"""Aliases in one mention; each is an alias row and a log record."""
MOST_EXPANSIONS: Final = 100_000
"""The largest ``max_expansions`` a query may ask for: no bounded answer reads, so uses, more edges."""
MAX_TRACE_EDGES: Final = MOST_EXPANSIONS
"""Edge ids one trace records: a bounded answer uses at most the edges it may read."""
MAX_QUERY_BYTES: Final = 64 * 1024
"""A trace's query, as JSON: a query's name, anchor, clocks and parameters."""
ENTITY_TEXT: Final = 2 * MAX_NAME + 1
"""An anchor as a read takes it: the longest canonical id an event can make (``Type:id``), or an alias
or ``Type:name`` as long."""
