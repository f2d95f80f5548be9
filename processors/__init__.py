"""Pure domain logic: no Kafka, no RocksDB. State comes in through the ports in ``ports.py``."""

from processors.native import prefer_compiled

prefer_compiled(__path__, "processors")
