"""What a stored offset points into: the identity of its topic (``processors.positions`` decides
from it which stored offsets to trust)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from streams.kafka.config import ADMIN_DEFAULTS, LIBRDKAFKA_LOG

log = logging.getLogger(__name__)

_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
"""The all-zero topic id (base64) a broker without topic ids answers with."""


class TopicIdentities:
    """Asks the cluster, through one admin client, which topics its names stand for now."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            # Through the quiet logger: a lost broker is otherwise reported twenty times a second.
            self._admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": self.bootstrap, "logger": LIBRDKAFKA_LOG})
        return self._admin

    def of(self, topics: Iterable[str]) -> dict[str, str | None]:
        """``CLUSTER_ID/TOPIC_ID`` per topic: a topic made anew, or a new broker's, has another. None
        where the cluster cannot tell (no topic ids): its stored offsets are then resumed from as stored."""
        names = sorted(set(topics))
        if not names:
            return {}
        try:
            cluster = self.admin.describe_cluster(request_timeout=self.timeout).result().cluster_id
            described = self.admin.describe_topics(TopicCollection(names), request_timeout=self.timeout)
            identities: dict[str, str | None] = {}
            for name, future in described.items():
                topic_id = str(future.result().topic_id or "")
                identities[name] = f"{cluster}/{topic_id}" if topic_id and topic_id != _NO_TOPIC_ID else None
            return identities
        except KafkaException as error:
            log.warning("could not ask %s for the identity of %s (%s): stored offsets there are resumed from as "
                        "stored", self.bootstrap, ", ".join(names), error)
            return dict.fromkeys(names)
        finally:
            self.admin.poll(0)  # serves the client's log lines to the logger
