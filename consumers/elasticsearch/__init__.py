"""The Elasticsearch applier: one index per table, external versions, bulk API."""
