"""Feed adapters' input and output: files, standard streams and Kafka (``processors.feeds`` maps)."""
