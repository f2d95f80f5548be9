"""The ledger worker: consumes the input topics, applies them through ``processors``, commits state,
offsets and outbox in one RocksDB write, then sends the outbox (``loop``); with the assignment,
rebuild, claim and fence protocols that keep that exactly-once across workers."""
