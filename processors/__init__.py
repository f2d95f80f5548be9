"""Pure domain logic: no Kafka, no RocksDB. State comes in through the ports in ``ports.py``."""

from processors.native import refuse_stale_build

refuse_stale_build()
