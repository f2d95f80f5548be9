"""Pydantic models of every event, command, edge version and query result, and the ontology."""
