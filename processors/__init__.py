"""Pure domain logic: no Kafka, no RocksDB. State comes in through the ports in ``ports.py``."""
