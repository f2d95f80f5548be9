"""I/O: Kafka wiring, the embedded broker, feed files, the CLI and the HTTP API.

One module here is pure logic with no I/O, and compiled with the core (``processors.native.COMPILED``):
``ledger_log``, the records a worker's batch emits, built once per version, and the replay of them."""

from processors.native import prefer_compiled

prefer_compiled(__path__, "streams")
