"""The MongoDB applier: documents keyed by primary key, guarded by seqno (pymongo)."""
