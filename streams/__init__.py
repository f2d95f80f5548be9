"""I/O: Kafka wiring, the embedded broker, feed files, the CLI and the HTTP API."""
