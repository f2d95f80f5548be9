"""The imperative shell: everything that talks to Kafka, the network or a terminal.

- ``streams.kafka``  — librdkafka settings, topics, the embedded broker, producers.
- ``streams.worker`` — the ledger worker: consume, apply, commit, send; assignment and rebuilds.
- ``streams.log``    — the ``edge-versions`` log's records, and the query replica that follows them.
- ``streams.api``    — the HTTP API for agents, and the cache-invalidation publisher it feeds.
- ``streams.cli``    — the ``edgeledger`` command line.
- ``streams.metrics`` — Prometheus metrics, fed by observers (the worker never calls them directly).
"""
