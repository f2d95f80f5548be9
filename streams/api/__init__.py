"""What agents and other programs call: the HTTP API, and the cache-invalidation records it publishes."""
