"""Filters: a THL event in, the event (changed or not) or nothing out (Tungsten's filters).

Two kinds run at two stages:

- replicate/ignore by ``schema.table`` (``replicate.py``) runs inside the extractor before a
  seqno is assigned, so a transaction that filters to nothing takes no seqno, and per
  consumer group before the applier;
- a declared chain (``chain.py``: drop column, rename, ENUM/SET to string, primary key
  override, mask or hash, a user's own filter by dotted path) runs in its declared order at
  extraction (changes the THL for every group) or per consumer group (changes only that
  target). A chain filter changes items; at extraction it never takes a seqno away (an
  event it empties keeps its seqno, with no data), so seqnos stay gapless.
"""

from __future__ import annotations

from replicator.filters.chain import FilterChain, FilterError, build_chain
from replicator.filters.replicate import Filter, ItemFilter, ReplicateFilter, TrackingSchemaFilter

__all__ = ["Filter", "FilterChain", "FilterError", "ItemFilter", "ReplicateFilter",
           "TrackingSchemaFilter", "build_chain"]
