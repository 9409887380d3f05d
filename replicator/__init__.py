"""replicator."""
