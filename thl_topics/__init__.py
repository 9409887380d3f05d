"""thl_topics."""
