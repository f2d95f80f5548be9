"""Kafka plumbing shared by every process: client settings, topics, the embedded broker, producers."""
